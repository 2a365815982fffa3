"""LoopTransport: items awaited as coroutines on one event-loop thread."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import queue
import threading
import time
import warnings
from collections.abc import Awaitable, Callable
from typing import Any

from datapipes._lifecycle import INTERRUPT_JOIN_TIMEOUT, Deadline
from datapipes.base import add_item_note
from datapipes.dispatch.stall import Where, await_chain, task_chains
from datapipes.dispatch.transport import ERROR, LOST, OK, Results
from datapipes.errors import WorkerLostError
from datapipes.event_loop import EventLoopThread
from datapipes.stats import StatsCounter

__all__ = ["LoopTransport"]


class LoopTransport:
    """``fn(item)``'s coroutines, run concurrently on ``loop``; the dispatcher bounds how many
    are in the node, and ``max_running`` (None: no bound of its own) how many of them await
    ``fn`` at once: the others wait their turn on the loop, which starts one as another ends,
    with no call from the consumer.

    Outcomes cross to the consumer as values on the results queue, put by the coroutine
    itself: a ``concurrent.futures`` future chained to a task would replace a
    ``TimeoutError`` or ``CancelledError`` raised by ``fn`` with a new object, losing its
    note and traceback. Every exception ``fn`` raises is an outcome, ``SystemExit`` and
    ``KeyboardInterrupt`` included: none escapes into the loop, which keeps running. A
    coroutine that never finished (the loop closed or died) is reported ``LOST``, as a
    :class:`~datapipes.WorkerLostError` naming the loop's thread, or as the ``SystemExit`` /
    ``KeyboardInterrupt`` that killed the loop.

    The feed (pulling the source) runs inline, in the consumer's thread at the start of
    ``next()``: never on the loop, since a source may itself wait on this loop (or block it).
    The items a feed submits are held until its :meth:`flush`, which hands them to the loop in
    one call (one wake-up of the loop's thread per feed, not one per item). ``pending`` is the
    feeding thread's (one feed runs at a time); ``tasks`` is the loop thread's only.
    """

    def __init__(
        self,
        name: str,
        fn: Callable[[Any], Awaitable[Any]],
        loop: EventLoopThread,
        *,
        owns_loop: bool,
        stats: StatsCounter,
        max_running: int | None = None,
    ) -> None:
        self.name = name
        # Awaited and released on the loop thread only (a Semaphore binds to its loop at first use).
        self._turns = None if max_running is None else asyncio.Semaphore(max_running)
        self.fn = fn
        self.loop = loop
        self.owns_loop = owns_loop
        self.stats = stats
        self.results: Results = queue.SimpleQueue()
        self.tasks: set[asyncio.Task[Any]] = set()  # the loop thread only
        self.pending: list[tuple[int, Any]] = []  # (seq, item) submitted by the feed running, not yet flushed
        self._closing = threading.Lock()  # a flush starts its items before close() cancels, or not at all
        # seq -> its coroutine while it awaits fn: set and popped on the loop thread, read (copied)
        # by a stall report in the consumer's.
        self.awaiting: dict[int, Awaitable[Any]] = {}
        self.feeds_inline = True
        self.feeds_at_delivery = False
        self.receives = False
        self.counts_items = False
        self.closed = False

    # -- the dispatcher's calls ----------------------------------------------------------------
    def open(self, results: Results) -> None:
        self.results = results

    def room(self) -> int | None:
        return 0

    def submit(self, worker: int, seq: int, item: Any) -> None:
        self.pending.append((seq, item))

    def flush(self) -> None:
        pending, self.pending = self.pending, []
        if not pending:
            return
        try:
            with self._closing:
                if self.closed:  # closed by another thread while the feed pulled: dropped
                    return
                futures = self.loop.submit_all([self._call(seq, item) for seq, item in pending])
        except RuntimeError as exc:  # the loop is closed (or died)
            for seq, _ in pending:
                self.results.put((seq, LOST, self._lost_error(seq, exc), -1, time.perf_counter()))
            return
        for (seq, _), future in zip(pending, futures, strict=True):
            future.add_done_callback(functools.partial(self._done, seq))

    def received(self, worker: int) -> bool:
        return False

    def ended(self, worker: int) -> list[int]:
        return []

    def wake(self, feed: Callable[[], None]) -> bool:
        raise AssertionError("an inline transport is never woken")

    def receive(self, deadline: Deadline | None) -> bool:
        raise AssertionError("the coroutines put their own messages")

    def where(self, seqs: list[int]) -> dict[int, Where]:
        """An item awaits ``fn`` on the loop's thread (its coroutine's chain), or waits its turn."""
        awaiting = self.awaiting.copy()
        thread = self.loop.name
        tasks = task_chains(self.loop.loop) if awaiting else ()
        out: dict[int, Where] = {}
        for seq in seqs:
            coro = awaiting.get(seq)
            if coro is None:
                out[seq] = Where("queued")
            else:
                out[seq] = Where("awaiting", -1, thread, awaits=await_chain(coro), tasks=tasks)
        return out

    def skips(self, error: BaseException) -> bool:
        """Errors are skipped, never a request to stop (SystemExit, Ctrl-C)."""
        return isinstance(error, (Exception, asyncio.CancelledError))

    # -- the loop thread ---------------------------------------------------
    async def _call(self, seq: int, item: Any) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        try:
            if self._turns is not None:  # max_running: wait for a turn to await fn
                await self._turns.acquire()
        except BaseException:
            self.tasks.discard(task)
            raise
        start = time.perf_counter()
        try:
            coro = self.fn(item)
            self.awaiting[seq] = coro
            value, kind = await coro, OK
        except asyncio.CancelledError as exc:
            if task.cancelling():  # cancelled by close or by closing the loop
                raise
            value, kind = self._failed(exc, seq, item), ERROR  # raised by fn itself: an error like any other
        except GeneratorExit:  # the coroutine is being closed, not an outcome
            raise
        except BaseException as exc:  # SystemExit and KeyboardInterrupt too: out of the loop
            # (asyncio re-raises them out of run_forever, which would kill the loop thread),
            # to the consumer, who raises them at this item's place.
            value, kind = self._failed(exc, seq, item), ERROR
        finally:
            self.awaiting.pop(seq, None)
            self.stats.add(busy_s=time.perf_counter() - start)
            self.tasks.discard(task)
            if self._turns is not None:
                self._turns.release()
        self.results.put((seq, kind, value, -1, time.perf_counter()))

    def _failed(self, exc: BaseException, seq: int, item: Any) -> BaseException:
        add_item_note(exc, self.name, seq, item)
        self.stats.add(errors=1)
        return exc

    def _done(self, seq: int, future: concurrent.futures.Future[None]) -> None:
        """A coroutine that never finished (cancelled, or the loop closed or died): lost."""
        if not future.cancelled() and future.exception() is None:
            return  # finished: its outcome is on the results queue
        cause = None if future.cancelled() else future.exception()
        self.results.put((seq, LOST, self._lost_error(seq, cause), -1, time.perf_counter()))

    def _lost_error(self, seq: int, cause: BaseException | None) -> BaseException:
        death = cause.__cause__ if cause is not None else None
        if isinstance(death, (SystemExit, KeyboardInterrupt)):
            return death  # raised by a task of the loop: what the caller asked for, as itself
        error = WorkerLostError(
            f"{self.name}: item #{seq} of this epoch was lost: the event loop {self.loop.name!r} "
            + ("was closed" if death is None else f"died of {death!r}")
            + " while the epoch was running",
            worker=self.loop.name,
        )
        error.__cause__ = cause
        return error

    # -- closing ------------------------------------------------------------------------------
    async def _cancel_tasks(self) -> None:
        tasks = list(self.tasks)
        self._cancel_tasks_now()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _cancel_tasks_now(self) -> None:
        # Once each: a second cancel() would interrupt the coroutine's own clean-up (an
        # ``await`` in its ``finally``), which is what awaiting the cancellation waits for.
        for task in list(self.tasks):
            if not task.cancelling():
                task.cancel()

    def close(self, timeout: float | None, deadline: Deadline, *, warn: bool, interrupted: bool) -> bool:
        """Cancel the coroutines in flight and await them (up to ``timeout``, then a warning);
        after Ctrl-C, should some still run, a loop the transport owns is closed at once,
        leaving them behind. Always True: a coroutine left running holds no thread."""
        with self._closing:
            if self.closed:
                return True
            self.closed = True
        if interrupted:
            timeout = INTERRUPT_JOIN_TIMEOUT
        finished = self._cancel(timeout, warn=warn)
        if interrupted and not finished and self.owns_loop:
            self.loop.close(0.0, warn=False)
        return True

    def _cancel(self, timeout: float | None, *, warn: bool) -> bool:
        if self.loop.closed:
            return True
        try:
            self.loop.run(self._cancel_tasks(), timeout)
        except RuntimeError:
            # Either the loop closed meanwhile (closing it cancels every task), or this is the
            # loop's own thread (a finalizer run there), which cannot wait for itself: cancel
            # now, the loop finishes the cancellation.
            try:
                self.loop.loop.call_soon_threadsafe(self._cancel_tasks_now)
            except RuntimeError:
                pass
        except concurrent.futures.TimeoutError:
            if warn:
                warnings.warn(
                    f"{self.name}: coroutines still running {timeout}s after they were cancelled",
                    RuntimeWarning,
                    stacklevel=4,
                )
            return False
        return True
