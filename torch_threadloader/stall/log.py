"""``stall_report_after``: a loader's stall reports (:class:`StallLog`), made from what its
dispatcher says a waiting ``next()`` waits for, warned, logged and kept."""

from __future__ import annotations

import ast
import dataclasses
import logging
import reprlib
import threading
import traceback
import types
import warnings
from collections import deque
from collections.abc import Callable
from typing import Any

import datapipes as dp
from torch_threadloader.stall.report import InFlight, StallReport, ThreadStack
from torch_threadloader.stall.stacks import stack_lines, stage_of, thread_frames
from torch_threadloader.userdata import Index

__all__ = ["KEPT_REPORTS", "LOGGER", "LoaderStallWarning", "StallLog"]

#: The package's logger: a stall report is a ``WARNING`` record on it.
LOGGER = logging.getLogger("torch_threadloader")

#: How many reports a loader keeps (the newest).
KEPT_REPORTS = 32


class LoaderStallWarning(UserWarning):
    """A ``next()`` of a ``ThreadLoader`` has waited ``stall_report_after`` seconds (or a
    doubling of it); ``report`` says for what. Nothing was stopped: the wait goes on."""

    def __init__(self, report: StallReport | str) -> None:
        self.report = report if isinstance(report, StallReport) else None
        super().__init__(str(report))

    def __reduce__(self) -> tuple[type[LoaderStallWarning], tuple[str]]:
        return type(self), (str(self),)


class StallLog:
    """A loader's stall reports, newest last, at most :data:`KEPT_REPORTS`, over every epoch.
    Reports are added by the consumer's thread of any epoch and read from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reports: deque[StallReport] = deque(maxlen=KEPT_REPORTS)

    def reports(self) -> list[StallReport]:
        """The reports made so far, newest last."""
        with self._lock:
            return list(self._reports)

    def watch(
        self, after: float | None, *, samples: bool, worker_of: Callable[[Any], int] | None = None
    ) -> dp.StallWatch | None:
        """The watch an epoch's dispatcher is given (None: ``stall_report_after=None``);
        ``samples``: its items are samples (``defer_stragglers``: the batch a sample will go
        into is not known), else batches; ``worker_of(item)``: the worker an item in flight is
        loaded by, where its thread does not say (a thread per batch loading)."""
        if after is None:
            return None
        return dp.StallWatch(after, lambda view: self.add(make_report(view, samples=samples, worker_of=worker_of)))

    def add(self, report: StallReport) -> None:
        """Keep ``report``, log it and warn with it."""
        with self._lock:
            self._reports.append(report)
        LOGGER.warning("ThreadLoader stall: %s", report)  # first: a warning may be made an error
        warnings.warn(LoaderStallWarning(report), stacklevel=2)


def make_report(view: dp.StallView, *, samples: bool, worker_of: Callable[[Any], int] | None = None) -> StallReport:
    """The report of what ``view``'s ``next()`` waits for: each unit in flight with its stage
    (and worker: ``worker_of(item)``, else its thread's), and the stacks of the threads that run one."""
    names = {where.thread for _, _, where, _ in view.in_flight if where.thread is not None}
    frames = thread_frames(names)
    entries = tuple(
        _entry(
            seq, item, where if worker_of is None else dataclasses.replace(where, worker=worker_of(item)), age, frames
        )
        for seq, item, where, age in view.in_flight
    )
    stacks = tuple(ThreadStack(name, stack_lines(frame)) for name, frame in sorted(frames.items()))
    stacks += _process_stacks(view)
    position, indices = (None, None) if samples else _unit(view.awaited_seq, view.awaited_item)
    return StallReport(view.waited_s, view.number, position, indices, entries, stacks)


def _entry(seq: int, item: Any, where: dp.Where, age: float, frames: dict[str, types.FrameType]) -> InFlight:
    position, indices = _unit(seq, item)
    return InFlight(position, indices, _stage(where, frames, indices), where.worker, where.thread, age)


def _process_stacks(view: dp.StallView) -> tuple[ThreadStack, ...]:
    """The stacks worker processes sent of their threads that are in a stage (not idle in the
    loader's own code), once per process."""
    out: list[ThreadStack] = []
    seen: set[str | None] = set()
    for _, _, where, _ in view.in_flight:
        if where.threads and where.thread not in seen:
            seen.add(where.thread)
            prefix = "" if where.thread is None else f"{where.thread}: "
            out += [ThreadStack(prefix + name, lines) for name, stage, lines in where.threads if stage]
    return tuple(out)


def _stage(where: dp.Where, frames: dict[str, types.FrameType], indices: tuple[Index, ...] | None) -> str:
    """The stage of one unit: from its samples' awaited calls, its thread's stack, its worker
    process's threads (one loading one of its samples first), or its place."""
    if where.awaits:
        return _awaiting(where, indices)
    if where.threads:
        return _in_process(where, indices)
    if where.behind is not None:
        return f"queued behind #{where.behind}"
    if where.thread is None:
        return where.state
    return stage_of(frames.get(where.thread)) or where.state


def _awaiting(where: dp.Where, indices: tuple[Index, ...] | None) -> str:
    """An awaiting unit in words: each of its samples' dataset calls (``__getitem__(5)``) with
    the call it awaits and the URL a frame shows, else its own chain's innermost calls."""
    wanted = None if indices is None else {reprlib.repr(i) for i in indices}
    calls = []
    for chain in (where.awaits, *where.tasks):
        call = _dataset_call(chain, wanted)
        if call is not None and call not in calls:
            calls.append(call)
    if calls:
        more = f"; and {len(calls) - _SHOWN_CALLS} more" if len(calls) > _SHOWN_CALLS else ""
        return "awaiting " + "; ".join(calls[:_SHOWN_CALLS]) + more
    return "awaiting " + " -> ".join(frame.name for frame in where.awaits[-3:])


_SHOWN_CALLS = 4


def _in_process(where: dp.Where, indices: tuple[Index, ...] | None) -> str:
    """``in a worker process: Dataset.__getitem__(5) on <thread>``: the stage of the process's
    thread that loads one of ``indices`` (else of any thread in a stage), or its place."""
    staged = [(name, stage) for name, stage, _ in where.threads if stage]
    wanted = () if indices is None else tuple(f"({i!r})" for i in indices)
    mine = [(name, stage) for name, stage in staged if stage.endswith(wanted)] if wanted else []
    chosen = mine or staged
    return f"{where.state}: {chosen[0][1]} on {chosen[0][0]}" if chosen else where.state


def _dataset_call(chain: tuple[traceback.FrameSummary, ...], wanted: set[str] | None) -> str | None:
    """``Dataset.__getitem__(5) -> sleep (url)`` for a chain through a dataset call on one of
    the ``wanted`` indices (any, for None), else None."""
    for k, frame in enumerate(chain):
        if frame.name.rpartition(".")[2] not in _DATASET_CALLS:
            continue
        argument = _local(frame, "argument") or ""
        if wanted is not None and argument and argument not in wanted:  # unknown (free-threaded): any
            return None
        inner = chain[-1].name if k + 1 < len(chain) else None
        shown = next((_local(f, "shown") for f in reversed(chain[k:]) if _local(f, "shown")), None)
        text = f"{frame.name}({argument})" + (f" -> {inner}" if inner else "")
        return text + (f" ({shown})" if shown else "")
    return None


_DATASET_CALLS = frozenset({"__getitem__", "__getitems__"})


def _local(frame: traceback.FrameSummary, name: str) -> str | None:
    """A local a summary kept (``FrameSummary`` keeps each one's ``repr``: of a string here)."""
    text = (frame.locals or {}).get(name)
    if text is None:
        return None
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text
    return value if isinstance(value, str) else text


def _unit(seq: int, item: Any) -> tuple[int | None, tuple[Index, ...] | None]:
    """(position, indices) of a dispatcher's item: a tagged ``(position, indices)`` or ``(position,
    index)``, a batch's indices, a sample's index, or something else (an ``IterableDataset``'s
    turn: no indices)."""
    if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], int):
        position, indices = item
        return position, tuple(indices) if isinstance(indices, (list, tuple)) else (indices,)
    if isinstance(item, list):
        return seq, tuple(item)
    if isinstance(item, int) and not isinstance(item, bool):
        return seq, (item,)
    return seq, None
