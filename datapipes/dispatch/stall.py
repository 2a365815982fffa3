"""What a waiting ``next()`` of a :class:`~datapipes.dispatch.Dispatcher` waits for.

A :class:`StallWatch` given to a dispatcher is called, in the consumer's thread and without
stopping anything, when one ``next()`` has waited ``after`` seconds, and again each time that
wait doubles (``after``, ``2 * after``, ``4 * after``, ...). It is handed a :class:`StallView`:
the item awaited and every item in flight, where each one is (which worker, running or queued
behind another) and for how long. The cost when nothing stalls is one timestamp per item.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import reprlib
import sysconfig
import time
import traceback
import types
from collections.abc import Callable
from typing import Any, Protocol

from datapipes._lifecycle import Deadline

__all__ = [
    "SHOWN_LOCAL",
    "Placement",
    "StallClock",
    "StallView",
    "StallWatch",
    "Where",
    "await_chain",
    "check_stall_after",
    "task_chains",
]


@dataclasses.dataclass(frozen=True, slots=True)
class Where:
    """Where one item in flight is: the ``worker`` it was given to (-1: none of its own),
    the thread that runs it now (``thread``; None: not running), the item it is queued
    behind (``behind``), and a word for the place (``state``: "running", "queued", "ready")."""

    state: str
    worker: int = -1
    thread: str | None = None
    behind: int | None = None
    #: An awaited coroutine's frames, outermost first (:func:`await_chain`); empty for a thread's item.
    awaits: tuple[traceback.FrameSummary, ...] = ()
    #: The chains of the other tasks on its loop (those it may wait on: a batch's samples).
    tasks: tuple[tuple[traceback.FrameSummary, ...], ...] = ()
    #: Its worker process's threads, as that process sent them: ``(name, stage, stack lines)``.
    threads: tuple[tuple[str, str | None, tuple[str, ...]], ...] = ()


class Placement(Protocol):
    """A transport that can say where its items are (optional: without it, items are "in flight").
    One whose workers are other processes may also have a ``gather(timeout)`` method, called
    first, without the lock, to ask them what they are doing (waiting at most ``timeout``)."""

    def where(self, seqs: list[int]) -> dict[int, Where]:
        """Where each of ``seqs`` (in flight, oldest first) is. Called with the dispatcher's lock
        held, in the consumer's thread: it reads the transport's books and must not block."""


@dataclasses.dataclass(frozen=True, slots=True)
class StallView:
    """A dispatcher's ``next()`` that has waited ``waited_s`` seconds (report ``number``, from
    1, of that ``next()``): the item ``awaited`` (its ``seq`` and the ``item`` the source gave;
    None if the source raised for it), and every item ``in_flight`` as ``(seq, item, Where,
    age_s)``, oldest first, ``age_s`` the seconds since the source gave it."""

    node: str
    waited_s: float
    number: int
    awaited_seq: int
    awaited_item: Any
    in_flight: tuple[tuple[int, Any, Where, float], ...]


@dataclasses.dataclass(frozen=True, slots=True)
class StallWatch:
    """Call ``callback(view)`` when one ``next()`` has waited ``after`` seconds, then at each
    doubling of that wait. The callback runs in the consumer's thread; an exception from it
    is raised by that ``next()``."""

    after: float
    callback: Callable[[StallView], None]

    def __post_init__(self) -> None:
        check_stall_after("after", self.after)


def check_stall_after(name: str, value: object) -> float | None:
    """``value`` as the seconds of a stall report (None: off); a clear error naming ``name``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a positive number of seconds or None, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive number of seconds or None, got {value!r}")
    return value


class StallClock:
    """The stall schedule of one ``next()`` that began to wait at ``start`` (``time.monotonic()``):
    due at ``after`` seconds, then at each doubling. Owned by the consumer's thread."""

    __slots__ = ("after", "due", "reports", "start")

    def __init__(self, after: float, start: float) -> None:
        self.after = after
        self.start = start
        self.due = start + after
        self.reports = 0

    def deadline(self, timeout: Deadline | None) -> Deadline:
        """The sooner of ``timeout`` and the next report: the most the next wait may last."""
        until_due = max(0.0, self.due - time.monotonic())
        remaining = None if timeout is None else timeout.remaining()
        return Deadline(until_due if remaining is None else min(until_due, remaining))

    def take_due(self) -> float | None:
        """The seconds waited if a report is due now (and the next one scheduled), else None."""
        now = time.monotonic()
        if now < self.due:
            return None
        self.reports += 1
        self.due = self.start + self.after * (2**self.reports)
        return now - self.start


#: A local of this name in an awaited coroutine's frame is its own account of what it awaits
#: (the remote datasets keep the location there, credentials taken out): shown in a report.
SHOWN_LOCAL = "shown"


def await_chain(coro: object) -> tuple[traceback.FrameSummary, ...]:
    """The frames a suspended coroutine awaits through, outermost first (what a task's stack
    would print), each with its :data:`SHOWN_LOCAL` if it has one. An awaitable that steps
    another by hand (not through ``await``) is followed through its ``awaited`` attribute (a
    frame's ``self``). Read from another thread:
    a diagnostic, never relied on (a frame that moves on meanwhile is read as it is then)."""
    if FREE_THREADED:  # the loop's thread may resume the coroutine while its frames are walked
        return ()
    frames: list[traceback.FrameSummary] = []
    seen = 0
    while coro is not None and seen < _MAX_CHAIN:
        seen += 1
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is None:
            break
        frames.append(_summary(frame))
        awaited = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
        if awaited is None and frame.f_code.co_name == "__await__" and READ_LOCALS:  # one that steps another by hand
            awaited = getattr(frame.f_locals.get("self"), "awaited", None)
        coro = awaited
    return tuple(frames)


_MAX_CHAIN = 64


#: The frames whose locals a report reads: a dataset's calls. Reading a frame's locals (before
#: Python 3.13) stores them in the frame for good, so a frame that holds its own task (the
#: loader's) would make a reference cycle: only these frames are read. None on a free-threaded
#: build, where the thread that runs a frame may change its locals while they are read.
FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
READ_LOCALS = frozenset() if FREE_THREADED else frozenset({"__getitem__", "__getitems__"})


def _summary(frame: types.FrameType) -> traceback.FrameSummary:
    """``frame`` as a summary; a dataset call's (:data:`READ_LOCALS`) with its
    :data:`SHOWN_LOCAL` and (as ``"argument"``) the repr of its first argument after ``self``
    (its index), where it has them."""
    code = frame.f_code
    if code.co_name not in READ_LOCALS:
        return traceback.FrameSummary(
            code.co_filename, frame.f_lineno, code.co_qualname, locals=None, lookup_line=False
        )
    local = frame.f_locals
    seen: dict[str, str] = {}
    shown = local.get(SHOWN_LOCAL)
    if isinstance(shown, str):
        seen[SHOWN_LOCAL] = shown
    if code.co_argcount >= 2 and code.co_varnames[1] in local:
        seen["argument"] = reprlib.repr(local[code.co_varnames[1]])
    return traceback.FrameSummary(
        code.co_filename, frame.f_lineno, code.co_qualname, locals=seen or None, lookup_line=False
    )


def task_chains(loop: asyncio.AbstractEventLoop) -> tuple[tuple[traceback.FrameSummary, ...], ...]:
    """The await chains of ``loop``'s tasks, read from another thread (a diagnostic: a set
    that changes meanwhile is read again)."""
    for _ in range(3):
        try:
            tasks = list(asyncio.all_tasks(loop))
            break
        except RuntimeError:  # the loop changed its set of tasks while it was read
            continue
    else:
        return ()
    coros = [task.get_coro() for task in tasks]
    return tuple(await_chain(coro) for coro in coros if coro is not None)
