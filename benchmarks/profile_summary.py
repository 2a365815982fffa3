"""Summarises a py-spy profile in collapsed-stack form (``py-spy record -f raw``) as text.

    python -m benchmarks profile_summary PROFILE.txt [--within time_epoch] [--top 25] [--by-library]

``PROFILE.txt`` is what ``py-spy record -f raw -o PROFILE.txt -- python -m benchmarks
profile_case ...`` wrote, outside the repository (e.g. in ``/tmp``).

Keeps the samples whose stack passes through a frame containing ``--within`` (by default the
timed epochs of :mod:`benchmarks.profile_case`), then lists the functions by inclusive share
(the time spent in them and what they call) and by self share (in them alone). With
``--native`` profiles (``py-spy record --native``), ``--by-library`` instead groups the samples
by the library of the innermost frame and the innermost Python function above it: where the
native time goes (``libgomp`` is OpenMP, the intra-op threads of torch).
"""

from __future__ import annotations

import collections
import re
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from benchmarks.result import Recorder, suite_parser

_LINE = re.compile(r" \(([^()]*?):\d+\)$")


def _frame(raw: str) -> str:
    """``fn (path/to/file.py:123)`` -> ``fn (file.py)``: one entry per function, not per line."""
    match = _LINE.search(raw)
    if not match:
        return raw
    return f"{raw[: match.start()]} ({Path(match.group(1)).name})"


def _library(frame: str) -> str:
    match = re.search(r"\(([^()]*)\)$", frame)
    where = match.group(1) if match else ""
    if where.endswith(".py") or ".py:" in where or where.startswith("<"):
        return "Python"
    return Path(where.split(":")[0]).name or "?"


def _samples(text: str, within: str) -> Iterator[tuple[list[str], int]]:
    """``(frames, count)`` for each raw py-spy line whose stack passes through ``within``."""
    for line in text.splitlines():
        stack, _, count_s = line.rpartition(" ")
        if stack and count_s.isdigit() and within in stack:
            yield stack.split(";"), int(count_s)


def by_library(text: str, within: str) -> tuple[int, dict[str, collections.Counter[str]]]:
    """Samples through ``within``, and their count per innermost library and Python function."""
    groups: collections.Counter[str] = collections.Counter()
    total = 0
    for frames, count in _samples(text, within):
        python = [_frame(f) for f in frames if _library(f) == "Python"]
        groups[f"{_library(frames[-1])} under {python[-1] if python else '?'}"] += count
        total += count
    return total, {"share (innermost library, under the innermost Python function)": groups}


def summarise(text: str, within: str) -> tuple[int, dict[str, collections.Counter[str]]]:
    """Samples through ``within``, and their count per function: inclusive and self."""
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    total = 0
    for raw_frames, count in _samples(text, within):
        frames = [_frame(f) for f in raw_frames]
        total += count
        for name in set(frames):
            inclusive[name] += count
        own[frames[-1]] += count
    return total, {"inclusive share": inclusive, "self share": own}


def main(argv: Sequence[str] | None = None, *, suite: str = "profile_summary") -> int:
    parser = suite_parser(suite, __doc__, smoke_help="summarise a tiny built-in profile instead of PROFILE")
    parser.add_argument("profile", type=Path, nargs="?")
    parser.add_argument("--within", default="time_epoch")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--by-library", action="store_true")
    args = parser.parse_args(argv)
    if args.profile is None and not args.smoke:
        parser.error("PROFILE is required")
    text = SMOKE_PROFILE if args.smoke else args.profile.read_text()
    total, counters = (by_library if args.by_library else summarise)(text, args.within)
    if not total:
        print(f"no samples pass through {args.within!r}", file=sys.stderr)
        return 1
    recorder = Recorder(suite, argv)
    case = "built-in sample" if args.smoke else args.profile.name
    for metric, counter in counters.items():
        for name, n in counter.most_common(args.top):
            recorder.add(case, name, metric, [100 * n / total], "%", samples=total, within=args.within)
    return recorder.finish(args)


#: A profile of three samples, for ``--smoke``.
SMOKE_PROFILE = """\
main (run.py:1);time_epoch (harness.py:2);__next__ (loader.py:3) 3
main (run.py:1);time_epoch (harness.py:2);collate (collate.py:4) 1
main (run.py:1);idle (run.py:9) 1
"""


if __name__ == "__main__":
    sys.exit(main())
