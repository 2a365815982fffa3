"""ThreadMapper: applies a function to each item on worker threads, as torch assigns work to workers."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Literal, TypeVar

from datapipes._run import RunIterator
from datapipes._validate import check_choice, check_non_negative_int, check_positive_int, check_timeout
from datapipes.base import Node, NodeIterator, StateDict
from datapipes.dispatch import Dispatcher, DispatchSettings, ThreadTransport
from datapipes.dispatch.stall import StallWatch
from datapipes.thread_pool import ThreadPool

__all__ = ["ThreadMapper"]

T = TypeVar("T")
U = TypeVar("U")

#: With ``in_order=False``, how many times the node's capacity the newest item pulled may run
#: ahead of the oldest unfinished one; this keeps the checkpoint state bounded when one item
#: is very slow.
OUT_OF_ORDER_LEAD = 4


class ThreadMapper(Node[U]):
    """Yields ``fn(item)`` for each source item, computed on ``num_threads`` worker threads.

    Work is given out as torch's ``DataLoader`` gives batches to its workers: when the epoch
    opens, ``num_threads + max_pending`` items are pulled in the thread that opens it, then
    one per item consumed, by the worker thread the next item goes to, so ``next()`` only
    takes a finished item (with ``feed_on_consumer=True``, by the consumer's next ``next()``
    instead, as torch pulls its sampler: for a source that draws from a generator the
    consumer's thread also draws from, such as torch's global one); item ``i`` goes to
    thread ``i % num_threads`` (``in_order=True``), or to the next thread with fewer than
    its share of the items in flight (``in_order=False``). So the source is pulled one item
    at a time, in order, at the same points of the epoch as torch's sampler, and each thread
    sees the same items whatever the timing.

    Bounds: at most ``num_threads`` calls run at once, and at most ``num_threads +
    max_pending`` items are in the node (given to a thread, running, or finished and waiting
    for the consumer, reorder buffer included), however slow the consumer or any item.
    ``max_pending`` defaults to ``num_threads``.

    Order: ``in_order=True`` yields in source order; ``in_order=False`` yields in completion
    order. Both yield every item exactly once.

    ``max_lead`` (``in_order=False``): how far the newest item pulled may run ahead of the
    oldest unfinished one (default ``OUT_OF_ORDER_LEAD`` (4) times ``num_threads +
    max_pending``); a :class:`~datapipes.ReadyBatcher` sets it from its window.

    ``first_thread``: the thread the first item goes to (then the next in turn), so a resumed
    epoch can go on with the thread whose turn was next.

    With ``worker_of`` (``in_order=True``), item ``x`` goes to thread ``worker_of(x) %
    num_threads`` instead of the next in turn (a loader resuming mid-epoch keeps batch ``p`` on
    worker ``p % num_workers``, as the uninterrupted epoch had it).

    Per-thread functions: with ``worker_fn``, each thread calls ``worker_fn(i)`` once per
    epoch, on itself, before its first item, and applies the function it returns (``fn`` must
    then be None). With ``stop_ends_share=True``, a function raising ``StopIteration`` ends
    that thread's share of the epoch: its items still queued are dropped and later ones go to
    the other threads (how torch's workers end an ``IterableDataset``); the epoch ends when
    every thread has. Otherwise ``StopIteration`` is an error like any other.

    Errors: an exception from ``fn`` (or from the source, or from ``worker_fn``) is raised by
    ``next()`` at its item's place, as the same object with a note naming this node and the
    item; the next ``next()`` goes on with the following item. ``on_error="skip"`` drops
    items whose ``fn`` raised and counts them in ``stats()["skipped"]``. ``timeout`` makes a
    ``next()`` that waited that long raise :class:`~datapipes.NodeTimeoutError` naming the
    item; the item stays in place, so the next ``next()`` waits for it again.
    ``stall``: a :class:`~datapipes.dispatch.stall.StallWatch` told what a ``next()`` that has waited
    its ``after`` seconds waits for (again at each doubling), without stopping anything.

    Lifecycle: each ``iter()`` starts the threads of one epoch (or runs them on ``pool``,
    which its owner keeps across epochs; on a ``pinned`` pool, thread ``i``'s loop runs on the
    pool's thread ``i`` in every epoch). Exhaustion, ``close()``, ``with``, garbage
    collection of the iterator and interpreter exit stop them within one bounded wait (a
    thread still in a call after it is named once in a warning, and exits when the call
    returns). A ``next()`` waiting when another thread closes the epoch raises
    :class:`~datapipes.EpochClosedError`; a ``next()`` after ``close()`` raises
    ``StopIteration``.
    """

    def __init__(
        self,
        source: Node[T] | Iterable[T],
        fn: Callable[[T], U] | None = None,
        *,
        num_threads: int = 1,
        max_pending: int | None = None,
        in_order: bool = True,
        on_error: Literal["raise", "skip"] = "raise",
        timeout: float | None = None,
        pool: ThreadPool | None = None,
        name: str | None = None,
        worker_fn: Callable[[int], Callable[[T], U]] | None = None,
        stop_ends_share: bool = False,
        worker_of: Callable[[T], int] | None = None,
        first_thread: int = 0,
        feed_on_consumer: bool = False,
        max_lead: int | None = None,
        stall: StallWatch | None = None,
    ) -> None:
        super().__init__(source, name=name)
        self.feed_on_consumer = bool(feed_on_consumer)
        #: ``in_order=False``: how far the newest item pulled may be past the oldest unfinished
        #: one (None: ``OUT_OF_ORDER_LEAD`` times the capacity); a ``ReadyBatcher`` sets it.
        self.max_lead = None if max_lead is None else check_positive_int("max_lead", max_lead)
        self.first_thread = check_non_negative_int("first_thread", first_thread)
        if worker_of is not None and not callable(worker_of):
            raise TypeError(f"worker_of must be callable, got {type(worker_of).__name__}")
        self.worker_of = worker_of
        if (fn is None) == (worker_fn is None):
            raise TypeError("pass exactly one of fn (one function for every thread) and worker_fn (one per thread)")
        if fn is not None and not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__}")
        if worker_fn is not None and not callable(worker_fn):
            raise TypeError(f"worker_fn must be callable, got {type(worker_fn).__name__}")
        self.fn = fn
        self.worker_fn = worker_fn
        self.stop_ends_share = bool(stop_ends_share)
        self.num_threads = check_positive_int("num_threads", num_threads)
        self.max_pending = num_threads if max_pending is None else check_non_negative_int("max_pending", max_pending)
        self.in_order = bool(in_order)
        self.on_error = check_choice("on_error", on_error, ("raise", "skip"))
        self.timeout = check_timeout("timeout", timeout)
        self.stall = stall
        if pool is not None and pool.num_threads < num_threads:
            raise ValueError(f"pool has {pool.num_threads} threads, fewer than num_threads={num_threads}")
        self.pool = pool

    @property
    def capacity(self) -> int:
        """The most items in the node at once: ``num_threads + max_pending``."""
        return self.num_threads + self.max_pending

    def _open(self, state: StateDict | None) -> NodeIterator[U]:
        n = self.num_threads
        capacity = n + self.max_pending
        settings = DispatchSettings(
            self.name,
            capacity=capacity,
            max_lead=capacity if self.in_order else self.max_lead or OUT_OF_ORDER_LEAD * capacity,
            in_order=self.in_order,
            timeout=self.timeout,
            skip_errors=self.on_error == "skip",
            stall=self.stall,
        )
        transport = ThreadTransport(
            self.name,
            n,
            fn=self.fn,
            worker_fn=self.worker_fn,
            stop_ends_share=self.stop_ends_share,
            worker_of=self.worker_of if self.in_order else None,
            first_thread=self.first_thread,
            capacity=capacity,
            in_order=self.in_order,
            pool=self.pool,
            stats=self._stats,
        )
        transport.feeds_inline = self.feed_on_consumer
        source = self._open_source(state)
        skip = state.get("skip", ()) if state else ()
        return RunIterator(Dispatcher[U](settings, source, skip, transport, self._stats))
