"""``stall_report_after`` where the caller's thread loads each batch itself (``num_workers=0``
with a sync dataset, an ``IterableDataset`` or a node graph): no dispatcher waits there, so a
thread of the epoch's own watches each ``next()`` and reports one that has run that long, from
the caller's stack, without stopping it."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator

from datapipes._lifecycle import start_thread
from torch_threadloader.stall.log import StallLog
from torch_threadloader.stall.report import InFlight, StallReport, ThreadStack
from torch_threadloader.stall.stacks import stack_lines, stage_of
from torch_threadloader.userdata import Batch

__all__ = ["CALLER_WATCH_NAME", "CallerWatch"]

#: The watching thread's name.
CALLER_WATCH_NAME = "threadloader-stall-watch"
#: The longest the watching thread sleeps without looking at the ``next()`` in progress.
_MAX_POLL_S = 1.0


class CallerWatch:
    """Watches the ``next()`` calls of one epoch made in the caller's thread: each is a
    timestamp (:meth:`wrap`), read by a thread started at the first ``next()``, which reports a
    call that has run ``after`` seconds, then at each doubling. Owned by the epoch's run:
    :meth:`close` stops the thread within ``timeout``."""

    def __init__(self, after: float, log: StallLog) -> None:
        self.after = after
        self.log = log
        self.lock = threading.Lock()
        self.wake = threading.Condition(self.lock)
        self.closed = False  # guarded by lock
        self.thread: threading.Thread | None = None  # guarded by lock
        # The next() in progress: (started, position, caller's ident); set and cleared by the
        # caller (one store each), read by the watching thread.
        self.current: tuple[float, int, int] | None = None

    def wrap(self, source: Iterator[Batch]) -> Iterator[Batch]:
        """``source`` with each ``next()`` watched."""
        return _Watched(source, self)

    def started(self) -> None:
        """The first ``next()``: start the watching thread (not before: an epoch never pulled
        starts none)."""
        with self.lock:
            if self.thread is None and not self.closed:
                self.thread = start_thread(self._run, CALLER_WATCH_NAME)

    def close(self, timeout: float | None) -> None:
        """Stop the watching thread, waiting at most ``timeout`` (it never waits on the caller)."""
        with self.lock:
            self.closed = True
            self.wake.notify_all()
            thread = self.thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _run(self) -> None:
        poll = min(self.after / 4, _MAX_POLL_S)
        seen: tuple[float, int, int] | None = None
        number = 0
        while True:
            with self.lock:
                if self.closed:
                    return
                current = self.current
                if current is not seen:  # another next(): its own schedule
                    seen, number = current, 0
                due = None if current is None else current[0] + self.after * 2**number
                now = time.monotonic()
                if due is None or now < due:
                    self.wake.wait(poll if due is None else min(due - now, poll))
                    continue
            number += 1
            self.log.add(_report(current, number, now))  # type: ignore[arg-type]


def _report(current: tuple[float, int, int], number: int, now: float) -> StallReport:
    """The report of the caller's ``next()`` described by ``current``: its stack and stage."""
    start, position, ident = current
    frame = sys._current_frames().get(ident)
    name = next((t.name for t in threading.enumerate() if t.ident == ident), f"thread {ident}")
    stage = (stage_of(frame) if frame is not None else None) or "loading"
    stacks = (ThreadStack(name, stack_lines(frame)),) if frame is not None else ()
    del frame
    waited = now - start
    return StallReport(waited, number, position, None, (InFlight(position, None, stage, -1, name, waited),), stacks)


class _Watched:
    """An epoch's source whose ``next()`` calls are timestamped for a :class:`CallerWatch`."""

    __slots__ = ("_position", "_source", "_watch")

    def __init__(self, source: Iterator[Batch], watch: CallerWatch) -> None:
        self._source = source
        self._watch = watch
        self._position = -1

    def __iter__(self) -> _Watched:
        return self

    def __next__(self) -> Batch:
        watch = self._watch
        position = self._position = self._position + 1
        if position == 0:
            watch.started()
        watch.current = (time.monotonic(), position, threading.get_ident())
        try:
            return next(self._source)
        finally:
            watch.current = None
