"""Summarises a py-spy profile in collapsed-stack form (``py-spy record -f raw``) as text.

    python -m benchmarks.profile_summary PROFILE.txt [--within time_epoch] [--top 25]

``PROFILE.txt`` is what ``py-spy record -f raw -o PROFILE.txt -- python -m
benchmarks.profile_case ...`` wrote, outside the repository (e.g. in ``/tmp``).

Keeps the samples whose stack passes through a frame containing ``--within`` (by default the
timed epochs of :mod:`benchmarks.profile_case`), then lists the functions by inclusive share
(the time spent in them and what they call) and by self share (in them alone). With
``--native`` profiles (``py-spy record --native``), ``--by-library`` instead groups the samples
by the library of the innermost frame and the innermost Python function above it: where the
native time goes (``libgomp`` is OpenMP, the intra-op threads of torch).
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

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


def by_library(text: str, within: str, top: int) -> str:
    groups: collections.Counter[str] = collections.Counter()
    total = 0
    for frames, count in _samples(text, within):
        python = [_frame(f) for f in frames if _library(f) == "Python"]
        groups[f"{_library(frames[-1]):<28} under {python[-1] if python else '?'}"] += count
        total += count
    if not total:
        return f"no samples pass through {within!r}"
    lines = [
        f"{total} samples through {within!r}",
        "",
        "share      innermost library            innermost Python function",
    ]
    lines += [f"{100 * n / total:8.1f}%  {name}" for name, n in groups.most_common(top)]
    return "\n".join(lines)


def summarise(text: str, within: str, top: int) -> str:
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    total = 0
    for raw_frames, count in _samples(text, within):
        frames = [_frame(f) for f in raw_frames]
        total += count
        for name in set(frames):
            inclusive[name] += count
        own[frames[-1]] += count
    if not total:
        return f"no samples pass through {within!r}"
    lines = [f"{total} samples through {within!r}", "", "inclusive  function"]
    lines += [f"{100 * n / total:8.1f}%  {name}" for name, n in inclusive.most_common(top)]
    lines += ["", "self       function"]
    lines += [f"{100 * n / total:8.1f}%  {name}" for name, n in own.most_common(top)]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.profile_summary",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("profile", type=Path)
    parser.add_argument("--within", default="time_epoch")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--by-library", action="store_true")
    args = parser.parse_args(argv)
    summary = by_library if args.by_library else summarise
    print(summary(args.profile.read_text(), args.within, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
