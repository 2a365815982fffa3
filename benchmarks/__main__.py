"""``python -m benchmarks SUITE [ARGS]``: one command for every benchmark suite.

    python -m benchmarks --list                  # every suite, with what it measures
    python -m benchmarks SUITE --help            # a suite's own arguments
    python -m benchmarks per_batch --rounds 3    # run one; its results go to benchmarks/results/
    python -m benchmarks report FILE [FILE...]   # the table of results already written
    python -m benchmarks docs docs/performance.md  # its marked tables from benchmarks/results/

Every suite takes ``--out DIR`` (where its JSON results go) and ``--smoke`` (tiny sizes).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from benchmarks.suites import SUITES, invoke

__all__ = ["main"]


def _list() -> str:
    width = max(map(len, SUITES))
    return "\n".join(f"{name:<{width}}  {suite.description}" for name, suite in SUITES.items())


def _report(paths: Sequence[str]) -> int:
    from benchmarks.result import format_table, load_results

    if not paths:
        print("usage: python -m benchmarks report FILE [FILE...]", file=sys.stderr)
        return 2
    print("\n\n".join(format_table(load_results(Path(p))) for p in paths))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(__doc__.strip())
        print("\nSuites:\n" + _list())
        return 0 if args else 2
    if args[0] == "--list":
        print(_list())
        return 0
    if args[0] == "report":
        return _report(args[1:])
    if args[0] == "docs":
        from benchmarks.docs_tables import main as docs_main

        return docs_main(args[1:])
    if args[0] not in SUITES:
        print(f"error: unknown suite {args[0]!r}; `python -m benchmarks --list` lists them", file=sys.stderr)
        return 2
    return invoke(args[0], args[1:])


if __name__ == "__main__":
    sys.exit(main())
