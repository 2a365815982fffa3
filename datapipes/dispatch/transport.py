"""What a :class:`~datapipes.dispatch.Dispatcher` asks of the workers it gives items to.

A transport only moves work and results: it runs ``fn(item)`` somewhere (worker threads, an
event loop, worker processes) and reports each outcome as a :data:`Message` on the
dispatcher's results queue. Order, bounds, timeouts, state and the errors raised by ``next()``
belong to the dispatcher.
"""

from __future__ import annotations

import queue
from collections.abc import Callable
from typing import Any, Protocol

from datapipes._lifecycle import Deadline

__all__ = ["ALL_ENDED", "ENDED", "ERROR", "LOST", "Message", "OK", "Results", "StartFailed", "Transport"]

#: The kinds of outcome a message reports for an item.
OK, ERROR, ENDED, LOST = 0, 1, 2, 3

#: ``(seq, kind, value, worker, done_at)``: item ``seq``'s outcome (``OK``: its value; ``ERROR``:
#: the exception ``fn`` raised, noted; ``ENDED``: ``fn`` raised ``StopIteration`` and the
#: worker's share of the epoch is over; ``LOST``: the error to raise, the worker died before
#: the item finished), the worker that ran it (``-1``: none) and when (``time.perf_counter()``).
Message = tuple[int, int, Any, int, float]

#: The queue a transport puts its messages on (any thread may put; the consumer gets).
Results = queue.SimpleQueue[Any]

#: :meth:`Transport.room`'s answer when every worker's share has ended: the epoch is over.
ALL_ENDED = -1


class Transport(Protocol):
    """Submit to a worker, report results, wake, report a lost worker, close within a deadline.

    Threads: :meth:`open` and :meth:`close` are called without the dispatcher's lock;
    :meth:`room`, :meth:`submit`, :meth:`received` and :meth:`ended` are called with it held
    (by the consumer's thread or the dispatcher's feed thread), so the bookkeeping they share
    needs no lock of its own, and they must not block. Messages go on ``results`` from any
    thread, exactly one per submitted item unless the item was dropped by :meth:`ended` or
    the transport was closed.
    """

    #: The name a lost-worker or start error names (a thread prefix, a loop thread's name).
    name: str

    #: True: the dispatcher feeds in the consumer's thread, at the start of ``next()`` (a
    #: transport with no thread that may pull the source), and never calls :meth:`wake`.
    feeds_inline: bool

    #: With ``feeds_inline``: True feeds as an item is handed over, before ``next()`` returns
    #: it (where torch pulls its sampler); False at the start of the next ``next()``.
    feeds_at_delivery: bool

    #: True: the workers' outcomes arrive on channels of the transport's own (a worker
    #: process's pipe), which :meth:`receive` waits on in the consumer's thread and turns into
    #: messages; False: the workers put their messages on the results queue themselves.
    receives: bool

    #: True: the transport counts each item into ``items_in`` as a worker takes it; False: the
    #: dispatcher counts it as it is pulled from the source.
    counts_items: bool

    def open(self, results: Results) -> None:
        """Start the workers (or attach to running ones); their messages go on ``results``.
        A worker that cannot be started is reported by raising (here) or, later, by putting a
        :class:`StartFailed` on ``results``."""

    def room(self) -> int | None:
        """The worker the next item goes to; ``None`` when none can take one now (it is asked
        again after the next message); :data:`ALL_ENDED` when every share has ended."""

    def submit(self, worker: int, seq: int, item: Any) -> None:
        """Give item ``seq`` to ``worker`` (as :meth:`room` chose it; a transport may route
        by the item itself). Never blocks."""

    def flush(self) -> None:
        """The feed is done pulling for now: start what :meth:`submit` held back (a transport
        may hand a feed's items over at once). Called by the feeding thread, without the lock;
        never blocks."""

    def received(self, worker: int) -> bool:
        """A message for an item that ``worker`` ran was taken off the results queue; True
        when that made room that :meth:`room` refused before (out of order: a thread's share)."""

    def wake(self, feed: Callable[[], None]) -> bool:
        """Have ``feed()`` run soon on a thread of the transport's (never the caller's: the
        consumer goes on at once); False when every worker's share has ended."""

    def receive(self, deadline: Deadline | None) -> bool:
        """With ``receives``, in the consumer's thread: wait for what the workers sent (or a
        lost worker, or :meth:`close`'s wake) until ``deadline`` and put its messages on the
        results queue; False when the deadline passed first. Any message may be none (news of
        the workers only): the dispatcher asks again until one is there."""

    def ended(self, worker: int) -> list[int]:
        """``worker``'s share ended: the items still queued for it, which it drops."""

    def skips(self, error: BaseException) -> bool:
        """Whether ``on_error="skip"`` may drop this error of ``fn`` (never a request to stop)."""

    def close(self, timeout: float | None, deadline: Deadline, *, warn: bool, interrupted: bool) -> bool:
        """Stop the workers within ``deadline`` (what is left of ``timeout``), dropping queued items; True when every one
        stopped in time (a worker still in a call is named in a warning when ``warn``).
        ``interrupted``: after Ctrl-C, give up fast. Idempotent."""


class StartFailed:
    """On the results queue: a worker could not be started; the epoch cannot be whole."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error
