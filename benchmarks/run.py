"""``python -m benchmarks.run [--quick] [--workload NAME] [--out DIR]``: the benchmark harness,
writing to ``benchmarks/results/`` unless ``--out`` says otherwise.

The same as ``python -m torch_threadloader bench``, whose options it takes; see
``docs/benchmarks.md`` for what it measures and how.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from torch_threadloader.cli import main as cli_main

RESULTS = Path(__file__).resolve().parent / "results"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    command = "python -m benchmarks.run " + shlex.join(args)
    if not any(a == "--out" or a.startswith("--out=") for a in args) and "--list" not in args:
        args += ["--out", str(RESULTS)]
    return cli_main(["bench", *args], command=command.strip())


if __name__ == "__main__":
    sys.exit(main())
