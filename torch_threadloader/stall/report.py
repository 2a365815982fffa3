"""What a stall report says (:class:`StallReport`), as plain frozen values with a readable ``str``."""

from __future__ import annotations

import dataclasses

from torch_threadloader.userdata import Index

__all__ = ["InFlight", "StallReport", "ThreadStack"]


@dataclasses.dataclass(frozen=True, slots=True)
class InFlight:
    """One unit of work in flight: a batch (map-style, ``IterableDataset``, worker processes)
    or a sample (async datasets, ``defer_stragglers``), at ``position`` of the epoch's order
    (None where the mode has none), its sample ``indices`` (None where the mode does not know
    them), its ``stage`` in words (``"Blocking.__getitem__(5)"``, ``"collate"``, ``"queued
    behind batch 3"``, an awaited call and its URL), the ``worker`` (a thread's or a worker
    process's number; -1: none of its own), the ``thread`` running it (None: not running) and
    ``age_s``, the seconds since it was taken from the sampler."""

    position: int | None
    indices: tuple[Index, ...] | None
    stage: str
    worker: int
    thread: str | None
    age_s: float

    def __str__(self) -> str:
        place = [f"worker {self.worker}"] if self.worker >= 0 else []
        if self.thread is not None:
            place.append(f"on {self.thread}")
        where = ", ".join(filter(None, [" ".join(place), f"{self.age_s:.1f} s"]))
        at = "?" if self.position is None else self.position
        indices = "" if self.indices is None else f" indices {_short(self.indices)}"
        return f"#{at}{indices}: {self.stage} ({where})"


@dataclasses.dataclass(frozen=True, slots=True)
class ThreadStack:
    """The Python stack of a loader thread (or of a worker process's thread) that holds work,
    outermost call first, as ``traceback`` prints it."""

    thread: str
    lines: tuple[str, ...]

    def __str__(self) -> str:
        return f'Thread "{self.thread}" (most recent call last):\n' + "".join(self.lines).rstrip("\n")


@dataclasses.dataclass(frozen=True, slots=True)
class StallReport:
    """What one ``next()`` of a ``ThreadLoader`` had waited ``waited_s`` seconds for (report
    ``number`` of that ``next()``, from 1): the batch at ``batch`` of the epoch with sample
    ``indices`` (None where the mode does not know them), the work ``in_flight`` (oldest
    first) and the ``stacks`` of the threads that hold it."""

    waited_s: float
    number: int
    batch: int | None
    indices: tuple[Index, ...] | None
    in_flight: tuple[InFlight, ...]
    stacks: tuple[ThreadStack, ...]

    def __str__(self) -> str:
        batch = "the next batch" if self.batch is None else f"batch {self.batch} of the epoch"
        indices = "" if self.indices is None else f" (sample indices {_short(self.indices)})"
        lines = [f"next() has waited {self.waited_s:.1f} s for {batch}{indices}."]
        lines.append(f"In flight ({len(self.in_flight)}):" if self.in_flight else "Nothing in flight.")
        lines += [f"  {entry}" for entry in self.in_flight]
        lines += [str(stack) for stack in self.stacks]
        return "\n".join(lines)


def _short(indices: tuple[Index, ...], limit: int = 16) -> str:
    """``indices`` as a list, the middle left out past ``limit``."""
    if len(indices) <= limit:
        return repr(list(indices))
    head = ", ".join(repr(i) for i in indices[: limit // 2])
    tail = ", ".join(repr(i) for i in indices[-2:])
    return f"[{head}, ... {len(indices) - limit // 2 - 2} more ..., {tail}]"
