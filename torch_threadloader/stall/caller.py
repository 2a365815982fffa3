"""``stall_report_after`` where the caller's thread loads each batch itself (``num_workers=0``
with a sync dataset, an ``IterableDataset`` or a node graph): no dispatcher waits there, so a
thread of the epoch's own looks in on the caller now and then, and reports a ``next()`` that has
made no progress that long, from the caller's stack, without stopping it: its stage, and the
sample indices of the batch it loads (a map-style dataset's, read from the fetcher's frame; not
on a free-threaded build, where no thread's frames are read). Nothing is added to the caller's
path: the watch reads what the epoch already keeps (whether a ``next()`` runs, how many batches
it returned) and the caller's stack."""

from __future__ import annotations

import sys
import threading
import time
import types
from typing import Protocol

from datapipes._lifecycle import start_thread
from torch_threadloader.stall.log import StallLog
from torch_threadloader.stall.report import InFlight, StallReport, ThreadStack
from torch_threadloader.stall.stacks import FREE_THREADED, NOT_READ, batch_indices, stack_lines, stage_of

__all__ = ["CALLER_WATCH_NAME", "CallerWatch"]

#: The watching thread's name.
CALLER_WATCH_NAME = "threadloader-stall-watch"
#: The longest the watching thread sleeps between two looks (also at most a quarter of ``after``).
_MAX_POLL_S = 1.0


class Busy(Protocol):
    """What the watch reads and sets of an epoch's run: whether a ``next()`` (or ``iter()``)
    runs, and whether the watch's thread is gone for lack of one (``watch_asleep``)."""

    busy: bool
    watch_asleep: bool


class Pulled(Protocol):
    """What the watch reads of an epoch's tally: the batches its ``next()`` returned."""

    pulled: int


class CallerWatch:
    """Looks in on one epoch every ``min(after / 4, 1 s)``: a ``next()`` still running with no
    batch returned since it was first seen is reported once it has been seen ``after`` seconds,
    then at each doubling. ``next_code`` is the code of the epoch's ``next()``, found on the
    caller's stack (the thread that opened the epoch, else any).

    Its thread runs only while the caller iterates: it is started by a ``next()`` (the epoch
    calls :meth:`wake` when ``run.watch_asleep``) and returns after one look that finds no
    ``next()`` running, so an epoch the caller stopped pulling (kept by an exception it holds,
    say) keeps no thread. Owned by the epoch's run: :meth:`close` stops it within its ``timeout``."""

    def __init__(self, after: float, log: StallLog, run: Busy, next_code: types.CodeType) -> None:
        self.after = after
        self.log = log
        self.run = run
        self.next_code = next_code
        self.caller = threading.get_ident()  # the thread that opens the epoch
        self.tally: Pulled | None = None  # set once the epoch's hooks are chosen
        self.lock = threading.Lock()
        self.wake_up = threading.Condition(self.lock)
        self.closed = False  # guarded by lock
        self.thread: threading.Thread | None = None  # the newest; guarded by lock
        self.running = False  # a thread looks in (and has not decided to leave); guarded by lock
        run.watch_asleep = True

    def start(self, tally: Pulled) -> None:
        """Count progress by ``tally``; the thread starts with the first ``next()``."""
        self.tally = tally

    def wake(self) -> None:
        """A ``next()`` runs and the thread is gone (or going): start one (in the caller's thread)."""
        with self.lock:
            self.run.watch_asleep = False
            if self.closed or self.running:
                return
            self.running = True
            self.thread = start_thread(self._run, CALLER_WATCH_NAME)

    def nudge(self) -> None:
        """A ``next()`` raised: look now (the thread leaves if the caller does not call again)."""
        with self.lock:
            self.wake_up.notify_all()

    def close(self, timeout: float | None) -> None:
        """Stop the watching thread, waiting at most ``timeout`` (it never waits on the caller)."""
        with self.lock:
            self.closed = True
            self.wake_up.notify_all()
            thread = self.thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _run(self) -> None:
        try:
            self._watch()
        finally:  # whatever ends it (a warnings filter that makes the report an error too)
            with self.lock:
                self.running = False

    def _watch(self) -> None:
        poll = min(self.after / 4, _MAX_POLL_S)
        seen: tuple[int, float] | None = None  # (batches returned, when first seen) of the next() running
        number = 0
        while True:
            with self.lock:
                if self.closed:
                    self.running = False
                    return
                self.wake_up.wait(poll)
                if self.closed or self._asleep():
                    self.running = False
                    return
            tally = self.tally
            pulled = tally.pulled if tally is not None else 0
            now = time.monotonic()
            if seen is None or seen[0] != pulled:  # another next(): its own schedule
                seen, number = (pulled, now), 0
                continue
            waited = now - seen[1]
            if waited >= self.after * 2**number:
                report = self._report(pulled, number + 1, waited)
                if report is not None:
                    number += 1
                    try:
                        self.log.add(report)
                    except Warning:  # made an error by a filter: kept in stalls(), the watch goes on
                        pass

    def _asleep(self) -> bool:
        """Under ``lock``: no ``next()`` runs, so the thread goes (saying so first, then looking
        again: a ``next()`` that began meanwhile either sees ``watch_asleep`` and wakes it, or is
        seen here)."""
        run = self.run
        if run.busy:
            return False
        run.watch_asleep = True
        if run.busy:
            run.watch_asleep = False
            return False
        return True

    def _report(self, position: int, number: int, waited: float) -> StallReport | None:
        """The report of the caller's ``next()``: its stack and stage (None: no thread is in it)."""
        if FREE_THREADED:  # no frame is walked there (stacks.NOT_READ): the caller that opened the epoch
            name = next((t.name for t in threading.enumerate() if t.ident == self.caller), f"thread {self.caller}")
            entry = InFlight(position, None, "loading", -1, name, waited)
            return StallReport(waited, number, position, None, (entry,), (ThreadStack(name, (NOT_READ,)),))
        found = self._caller_frame()
        if found is None:
            return None
        name, frame = found
        stage = stage_of(frame) or "loading"
        indices = batch_indices(frame)  # the batch's, where the caller loads one (a map-style dataset)
        stacks = (ThreadStack(name, stack_lines(frame)),)
        del frame
        entry = InFlight(position, indices, stage, -1, name, waited)
        return StallReport(waited, number, position, indices, (entry,), stacks)

    def _caller_frame(self) -> tuple[str, types.FrameType] | None:
        """The thread in the epoch's ``next()`` and its frame: the opener first, else any."""
        frames = sys._current_frames()
        try:
            idents = [self.caller, *(ident for ident in frames if ident != self.caller)]
            for ident in idents:
                frame = frames.get(ident)
                if frame is not None and _in_call(frame, self.next_code):
                    name = next((t.name for t in threading.enumerate() if t.ident == ident), f"thread {ident}")
                    return name, frame
            return None
        finally:
            del frames  # it holds this very frame: a cycle that would keep objects until a gc


def _in_call(frame: types.FrameType | None, code: types.CodeType) -> bool:
    while frame is not None:
        if frame.f_code is code:
            return True
        frame = frame.f_back
    return False
