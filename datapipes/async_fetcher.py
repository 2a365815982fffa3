"""AsyncFetcher: awaits a coroutine function for each item on one event-loop thread."""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import time
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Generic, Literal, TypeVar

from datapipes._lifecycle import DEFAULT_JOIN_TIMEOUT, register_for_exit
from datapipes._progress import Progress
from datapipes._validate import check_choice, check_positive_int, check_timeout
from datapipes.base import Node, NodeIterator, StateDict, add_item_note
from datapipes.event_loop import EventLoopThread

__all__ = ["AsyncFetcher"]

T = TypeVar("T")
U = TypeVar("U")


class AsyncFetcher(Node[U]):
    """Yields ``await fn(item)`` for each source item, with up to ``max_concurrency``
    coroutines in flight on one event-loop thread.

    Bounds: at most ``max_concurrency`` items are in the node, running or finished and
    waiting for the consumer. The source is pulled in the consumer's thread, inside
    ``next()``, to keep that many in flight.

    Loop: the fetcher starts one named event-loop thread (``f"{name}-loop"``) at its first
    epoch and keeps it for every later epoch, until :meth:`close` or garbage collection of the
    node; or it runs on ``loop``, an :class:`EventLoopThread` its owner keeps. Never a loop per
    item or per epoch. ``fn``'s coroutines run concurrently with each other on that loop.

    Order and errors are as in :class:`~datapipes.ThreadMapper`: ``in_order=True`` yields in
    source order, ``False`` in completion order; an exception is raised by ``next()`` at its
    item's place, the same object with a note; ``on_error="skip"`` drops failed items and
    counts them. Closing the iterator (or exhaustion, ``break`` and garbage collection,
    interpreter exit) cancels the coroutines still in flight and awaits their cancellation.
    """

    def __init__(
        self,
        source: Node[T] | Iterable[T],
        fn: Callable[[T], Awaitable[U]],
        *,
        max_concurrency: int = 16,
        in_order: bool = True,
        on_error: Literal["raise", "skip"] = "raise",
        timeout: float | None = None,
        loop: EventLoopThread | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(source, name=name)
        if not callable(fn):
            raise TypeError(f"fn must be an async function (a callable returning an awaitable), got {type(fn).__name__}")
        self.fn = fn
        self.max_concurrency = check_positive_int("max_concurrency", max_concurrency)
        self.in_order = bool(in_order)
        self.on_error = check_choice("on_error", on_error, ("raise", "skip"))
        self.timeout = check_timeout("timeout", timeout)
        self._loop = loop
        self._owns_loop = loop is None

    def event_loop(self) -> EventLoopThread:
        """The loop thread this fetcher runs on (started on first use when it owns it)."""
        with self._state_lock:
            if self._loop is None or (self._owns_loop and self._loop.closed):
                self._loop = EventLoopThread(f"{self.name}-loop")
            return self._loop

    def close(self) -> None:
        """Stop the fetcher's own event-loop thread (a loop passed in is its owner's to close)."""
        with self._state_lock:
            loop = self._loop if self._owns_loop else None
        if loop is not None:
            loop.close()

    def _open(self, state: StateDict | None) -> NodeIterator[U]:
        return _AsyncFetcherIterator(self, state)


class _Pending:
    __slots__ = ("future", "item", "own", "seq")

    def __init__(self, seq: int, item: Any, future: concurrent.futures.Future[Any], own: bool) -> None:
        self.seq = seq
        self.item = item
        self.future = future
        self.own = own  # True: the future runs fn; False: it carries the source's exception


class _FetchRun(Generic[U]):
    """Run state of one epoch; touched by the consumer thread, and ``tasks`` by the loop only."""

    def __init__(self, node: AsyncFetcher[U], state: StateDict | None) -> None:
        self.name = node.name
        self.fn = node.fn
        self.limit = node.max_concurrency
        self.in_order = node.in_order
        self.skip_errors = node.on_error == "skip"
        self.timeout = node.timeout
        self.stats = node._stats
        self.loop = node.event_loop()
        self.source = node._open_source(state)
        self.progress = Progress(self.source.state_dict(), state.get("skip", ()) if state else ())
        self.in_flight: deque[_Pending] = deque()  # pull order
        self.completed: queue.SimpleQueue[_Pending] = queue.SimpleQueue()  # in_order=False; <= limit
        self.next_seq = 0
        self.exhausted = False
        self.closed = False
        self.tasks: set[asyncio.Task[Any]] = set()
        register_for_exit(self)

    async def _call(self, seq: int, item: Any) -> Any:
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        start = time.perf_counter()
        try:
            return await self.fn(item)
        except Exception as exc:
            add_item_note(exc, self.name, seq, item)
            self.stats.add(errors=1, skipped=1 if self.skip_errors else 0)
            raise
        finally:
            self.stats.add(busy_s=time.perf_counter() - start)
            self.tasks.discard(task)

    def _fill(self) -> None:
        while not self.exhausted and len(self.in_flight) < self.limit:
            start = time.perf_counter()
            own = True
            try:
                item = next(self.source)
            except StopIteration:
                self.exhausted = True
                return
            except BaseException as exc:  # a source error is an item: raised at its place
                item, own = exc, False
            snapshot = self.source.state_dict()
            self.stats.add(items_in=1, wait_source_s=time.perf_counter() - start)
            seq = self.next_seq
            self.next_seq += 1
            if self.progress.pulled(seq, snapshot):
                self.progress.finished(seq)
                continue
            if own:
                future = self.loop.submit(self._call(seq, item))
            else:
                future = concurrent.futures.Future()
                future.set_exception(item)
            pending = _Pending(seq, item, future, own)
            self.in_flight.append(pending)
            if not self.in_order:
                future.add_done_callback(lambda _f, p=pending: self.completed.put(p))

    def next(self) -> U:
        while True:
            if self.closed:
                raise StopIteration
            self._fill()
            if not self.in_flight:
                raise StopIteration
            try:
                if self.in_order:
                    pending = self.in_flight[0]
                    concurrent.futures.wait([pending.future], timeout=self.timeout)
                    if not pending.future.done():
                        raise TimeoutError
                    self.in_flight.popleft()
                else:
                    pending = self.completed.get(timeout=self.timeout)
                    self.in_flight.remove(pending)
            except (TimeoutError, queue.Empty):
                waiting = f"item #{self.in_flight[0].seq}" if self.in_order else "any item"
                raise TimeoutError(
                    f"{self.name}: no result for {waiting} of this epoch within timeout={self.timeout}s"
                ) from None
            self.progress.finished(pending.seq)
            self.stats.peak(len(self.in_flight) + 1)
            error = pending.future.exception()
            if error is None:
                self.stats.add(items_out=1)
                return pending.future.result()  # type: ignore[no-any-return]
            if pending.own and self.skip_errors:
                continue
            self.stats.add(items_out=1)
            raise error

    def state_dict(self) -> StateDict:
        return self.progress.state()

    async def _cancel_tasks(self) -> None:
        tasks = list(self.tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def shutdown(self, timeout: float | None = DEFAULT_JOIN_TIMEOUT) -> None:
        """Cancel the coroutines in flight and await them, then close the source. Idempotent."""
        if self.closed:
            return
        self.closed = True
        for pending in self.in_flight:
            pending.future.cancel()
        self.in_flight.clear()
        if not self.loop.closed:
            try:
                self.loop.run(self._cancel_tasks(), timeout)
            except RuntimeError:  # the loop closed meanwhile; closing it cancelled and awaited them
                pass
        self.source.close()


class _AsyncFetcherIterator(NodeIterator[U]):
    def __init__(self, node: AsyncFetcher[U], state: StateDict | None) -> None:
        self._run = _FetchRun(node, state)
        self._finalizer = weakref.finalize(self, self._run.shutdown)

    def __next__(self) -> U:
        try:
            return self._run.next()
        except (StopIteration, KeyboardInterrupt):
            self.close()
            raise

    def state_dict(self) -> StateDict:
        return self._run.state_dict()

    def close(self) -> None:
        self._finalizer()
