"""The one timing loop of the suites: configurations side by side, in interleaved rounds.

:func:`interleave` runs every configuration once per round, in an order shuffled per round (or
alternated), so that the configurations share the machine's slow and fast moments; warm-up
rounds run first and are dropped. What a configuration's run returns is its measurement for
that round: usually a :class:`Timing` of one epoch (:func:`time_epoch`), which holds the wall
time, the process's CPU time (every thread) and the calling thread's CPU time. :func:`ratios`
pairs two configurations' measurements round by round; :func:`quantile` reads a distribution.
:func:`fresh_process` runs a suite's ``--child`` in a new interpreter, for settings that must
be made before a process starts (an allocator, a peak of memory).
"""

from __future__ import annotations

import gc
import json
import os
import random
import resource
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

__all__ = [
    "Timing",
    "close",
    "cpu_seconds",
    "fresh_process",
    "interleave",
    "quantile",
    "ratios",
    "time_epoch",
    "time_fresh_epoch",
    "timed",
    "timed_async",
]

T = TypeVar("T")


@dataclass(frozen=True)
class Timing:
    """One measured run: wall seconds, CPU seconds of the process (every thread; user and
    kernel), of which in the kernel, the calling thread's CPU seconds, minor page faults and
    context switches of the process, and the items (or batches) the run counted."""

    wall: float
    cpu: float
    kernel: float
    thread: float
    minor_faults: int
    voluntary_switches: int
    involuntary_switches: int
    count: int


def cpu_seconds() -> float:
    """User and kernel CPU seconds of this process so far (every thread)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class _Clock:
    """The clocks at a start; :meth:`stop` makes the :class:`Timing` since."""

    def __init__(self) -> None:
        self.before = resource.getrusage(resource.RUSAGE_SELF)
        self.thread, self.start = time.thread_time(), time.perf_counter()

    def stop(self, count: int) -> Timing:
        wall, thread = time.perf_counter() - self.start, time.thread_time() - self.thread
        after, before = resource.getrusage(resource.RUSAGE_SELF), self.before
        return Timing(
            wall=wall,
            cpu=after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime,
            kernel=after.ru_stime - before.ru_stime,
            thread=thread,
            minor_faults=after.ru_minflt - before.ru_minflt,
            voluntary_switches=after.ru_nvcsw - before.ru_nvcsw,
            involuntary_switches=after.ru_nivcsw - before.ru_nivcsw,
            count=count,
        )


def timed(run: Callable[[], int]) -> Timing:
    """The :class:`Timing` of ``run()``, which returns what it counted."""
    clock = _Clock()
    return clock.stop(run())


async def timed_async(run: Callable[[], Awaitable[int]]) -> Timing:
    """The :class:`Timing` of ``await run()``, which returns what it counted."""
    clock = _Clock()
    return clock.stop(await run())


def _batches(loader: Iterable[Any]) -> int:
    count = 0
    for _ in loader:
        count += 1
    return count


def time_epoch(loader: Iterable[Any], count: Callable[[Any], int] | None = None) -> Timing:
    """One whole epoch of ``loader``, ``iter()`` included; ``count`` counts what a batch holds
    (default: the epoch counts batches)."""
    if count is None:
        return timed(lambda: _batches(loader))
    counter = count
    return timed(lambda: sum(counter(batch) for batch in loader))


def time_fresh_epoch(make: Callable[[], Iterable[Any]]) -> Timing:
    """:func:`time_epoch` of what ``make()`` returns (made outside the timing)."""
    return time_epoch(make())


def interleave(
    runs: Mapping[str, Callable[[], T]],
    rounds: int,
    *,
    warmup: int = 1,
    order: str = "shuffle",
    seed: int = 0,
    collect: bool = True,
) -> dict[str, list[T]]:
    """``warmup + rounds`` rounds; in each, every run once, in an order shuffled per round
    (``order="shuffle"``), reversed every other round (``"alternate"``) or as given
    (``"fixed"``); the measurements of the last ``rounds`` rounds, per run. ``collect``: the
    young garbage of the previous run is collected before each run, outside its time."""
    rng = random.Random(seed)
    names = list(runs)
    out: dict[str, list[T]] = {name: [] for name in names}
    for round_ in range(warmup + rounds):
        turn = list(names)
        if order == "shuffle":
            rng.shuffle(turn)
        elif order == "alternate" and round_ % 2:
            turn.reverse()
        for name in turn:
            if collect:
                gc.collect(1)
            value = runs[name]()
            if round_ >= warmup:
                out[name].append(value)
    return out


def ratios(numerators: Sequence[float], denominators: Sequence[float]) -> list[float]:
    """Round by round (the two ran side by side in each), ``numerator / denominator``."""
    return [a / b for a, b in zip(numerators, denominators, strict=True)]


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ``values``, the nearest rank (no interpolation)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def close(loader: Any) -> None:
    """``loader.close()`` where it has one (ThreadLoader); torch's DataLoader stops its
    workers when it is garbage-collected."""
    closer = getattr(loader, "close", None)
    if callable(closer):
        closer()


def fresh_process(
    module: str, args: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float = 900
) -> Any:
    """Run ``python -m module *args`` in a fresh interpreter (with ``env`` added to this
    one's environment) and return the JSON of its last line of output; the child imports
    ``benchmarks`` from this checkout whatever its working directory."""
    child_env = {**os.environ, **(env or {})}
    root = str(Path(__file__).resolve().parent.parent)
    paths = [root, *(p for p in sys.path if p), child_env.get("PYTHONPATH", "")]
    child_env["PYTHONPATH"] = os.pathsep.join(paths).rstrip(os.pathsep)
    done = subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        env=child_env,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"python -m {module} {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
