"""Lifecycle: no thread and no coroutine survives exhaustion, close(), ``with``, ``break``
followed by garbage collection, an exception, or interpreter exit.

Closing joins the threads it stops, so these tests check ``threading.enumerate()`` right
after the event, with no grace period (the autouse leak fixture has one, for every test)."""

from __future__ import annotations

import asyncio
import collections
import textwrap
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import pytest

import datapipes as dp
from tests.fixtures.pipes import async_identity, close_graph, failing_at, fetcher, mapper
from tests.fixtures.scripts import run_timed
from tests.fixtures.threads import collect, new_threads

N = 50


def prefetcher(n: int = N) -> dp.Node[Any]:
    return dp.Prefetcher(range(n), depth=2)


def mapper_over_prefetcher(n: int = N) -> dp.Node[Any]:
    return dp.ThreadMapper(dp.Prefetcher(range(n), depth=1), lambda x: x, num_threads=2)


def fetcher_out_of_order(n: int = N) -> dp.Node[Any]:
    return dp.AsyncFetcher(range(n), async_identity, max_concurrency=4, in_order=False)


def mapper_over_fetcher(n: int = N) -> dp.Node[Any]:
    return dp.Prefetcher(dp.AsyncFetcher(range(n), async_identity, max_concurrency=3), depth=2)


FACTORIES: dict[str, Callable[..., dp.Node[Any]]] = {
    "ThreadMapper": partial(mapper, N, max_pending=1),
    "Prefetcher": prefetcher,
    "ThreadMapper(Prefetcher)": mapper_over_prefetcher,
    "AsyncFetcher": partial(fetcher, N),
    "AsyncFetcher(in_order=False)": fetcher_out_of_order,
    "Prefetcher(AsyncFetcher)": mapper_over_fetcher,
}


def loop_threads(node: dp.Node[Any] | None) -> set[str]:
    """Names of the loop threads a graph's AsyncFetchers keep across epochs."""
    names = set()
    while node is not None:
        if isinstance(node, dp.AsyncFetcher):
            names.add(f"{node.name}-loop")
        node = node.source
    return names


@pytest.fixture(params=sorted(FACTORIES))
def started_graph(request: pytest.FixtureRequest) -> Iterator[tuple[dp.Node[Any], set[threading.Thread]]]:
    before = set(threading.enumerate())
    node = FACTORIES[request.param]()
    yield node, before
    close_graph(node)


def epoch_threads(node: dp.Node[Any], before: set[threading.Thread]) -> list[str]:
    """Threads started since ``before``, other than the fetchers' loops (kept across epochs)."""
    keep = loop_threads(node)
    return sorted(t.name for t in new_threads(before) if t.name not in keep)


def test_no_thread_survives_exhaustion(started_graph: tuple[dp.Node[Any], set[threading.Thread]]) -> None:
    node, before = started_graph
    it = iter(node)
    assert epoch_threads(node, before) or loop_threads(node)  # it did start something
    assert list(it) == list(range(N))
    assert epoch_threads(node, before) == []  # while `it` is still referenced


def test_no_thread_survives_close(started_graph: tuple[dp.Node[Any], set[threading.Thread]]) -> None:
    node, before = started_graph
    it = iter(node)
    assert [next(it) for _ in range(3)] == [0, 1, 2]
    it.close()
    assert epoch_threads(node, before) == []
    it.close()  # idempotent
    assert list(it) == []


def test_no_thread_survives_a_with_block(started_graph: tuple[dp.Node[Any], set[threading.Thread]]) -> None:
    node, before = started_graph
    with iter(node) as it:
        assert next(it) == 0
    assert epoch_threads(node, before) == []


def test_no_thread_survives_break_then_del_and_gc(started_graph: tuple[dp.Node[Any], set[threading.Thread]]) -> None:
    node, before = started_graph
    it = iter(node)
    for x in it:
        if x == 5:
            break
    del it
    collect()
    assert epoch_threads(node, before) == []


def test_no_thread_survives_a_dropped_for_loop(started_graph: tuple[dp.Node[Any], set[threading.Thread]]) -> None:
    node, before = started_graph
    for x in node:
        if x == 5:
            break
    # No collect(): the loop's iterator is in no reference cycle, so dropping it is enough.
    assert epoch_threads(node, before) == []


def test_no_thread_survives_an_exception_raised_by_the_consumer(
    started_graph: tuple[dp.Node[Any], set[threading.Thread]],
) -> None:
    node, before = started_graph
    with pytest.raises(ZeroDivisionError):
        for x in node:
            if x == 4:
                raise ZeroDivisionError
    assert epoch_threads(node, before) == []


def test_no_thread_survives_the_first_epoch_when_a_second_starts(
    started_graph: tuple[dp.Node[Any], set[threading.Thread]],
) -> None:
    node, before = started_graph
    first = iter(node)
    next(first)
    first.close()
    second = iter(node)
    assert list(second) == list(range(N))
    assert epoch_threads(node, before) == []


@pytest.mark.parametrize("kind", ["ThreadMapper", "AsyncFetcher"])
def test_no_thread_survives_an_exception_raised_by_the_node(kind: str) -> None:
    before = set(threading.enumerate())
    fn = failing_at(4)
    if kind == "ThreadMapper":
        node: dp.Node[Any] = dp.ThreadMapper(range(N), fn, num_threads=3)
    else:

        async def afn(x: int) -> int:
            return fn(x)

        node = dp.AsyncFetcher(range(N), afn, max_concurrency=3)
    try:
        for _ in node:
            pass
    except ValueError as exc:
        assert exc is fn.raised[4]
    else:
        pytest.fail("the node's exception did not propagate")
    # The traceback kept the iterator's frame alive until the except block ended.
    collect()
    assert epoch_threads(node, before) == []
    close_graph(node)


def test_building_a_graph_starts_no_thread() -> None:
    before = set(threading.enumerate())
    graph = dp.Sampler(10).async_map(async_identity).map(lambda x: x, num_threads=4).prefetch(2)
    assert new_threads(before) == []  # threads start when an epoch starts
    assert list(graph) == list(range(10))
    close_graph(graph)


def test_header_exhaustion_stops_the_threads_of_its_source() -> None:
    before = set(threading.enumerate())
    it = iter(dp.ThreadMapper(range(1000), lambda x: x, num_threads=2).header(3))
    assert list(it) == [0, 1, 2]
    assert new_threads(before) == []  # while `it` is still referenced


def test_exhaustion_anywhere_downstream_closes_the_concurrent_nodes() -> None:
    before = set(threading.enumerate())
    graph = dp.Prefetcher(range(10), depth=2).batch(3).map(sum, num_threads=2).collate(lambda x: x).filter(bool)
    it = iter(graph)
    assert list(it) == [3, 12, 21, 9]
    assert new_threads(before) == []


def test_thread_names_say_which_node_owns_them() -> None:
    before = set(threading.enumerate())
    it = iter(dp.ThreadMapper(range(10), lambda x: x, num_threads=3, name="decode").prefetch(2))
    try:
        # A mapper's thread i starts thread i + 1, so the last ones may take a moment.
        deadline = time.monotonic() + 5
        while len(new_threads(before)) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sorted(t.name for t in new_threads(before)) == ["Prefetcher-0", "decode-0", "decode-1", "decode-2"]
    finally:
        it.close()
    assert new_threads(before) == []


# -- AsyncFetcher: the loop thread persists across epochs; coroutines do not ---------------


def test_fetcher_loop_thread_persists_across_epochs_until_node_close() -> None:
    before = set(threading.enumerate())
    node = dp.AsyncFetcher(range(5), async_identity, name="fetch")
    assert list(node) == list(range(5))
    (loop_thread,) = new_threads(before)
    assert loop_thread.name == "fetch-loop"
    assert list(node) == list(range(5))
    assert new_threads(before) == [loop_thread]
    node.close()
    assert not loop_thread.is_alive()
    node.close()  # idempotent


def test_fetcher_loop_thread_stops_when_the_node_is_garbage_collected() -> None:
    before = set(threading.enumerate())
    node = dp.AsyncFetcher(range(5), async_identity, name="fetch")
    it = iter(node)
    next(it)
    (loop_thread,) = new_threads(before)
    ref = weakref.ref(node)
    del node, it
    collect()
    assert ref() is None
    assert not loop_thread.is_alive()


def test_fetcher_starts_a_new_loop_after_close() -> None:
    node = dp.AsyncFetcher(range(3), async_identity)
    assert list(node) == [0, 1, 2]
    node.close()
    assert list(node) == [0, 1, 2]
    node.close()


class CancellationRecorder:
    """A coroutine function whose calls sleep forever, recording when they are cancelled
    (after ``cleanup_s`` of asynchronous clean-up, as closing a connection would take)."""

    def __init__(self, cleanup_s: float = 0.0, *, instant: int = 1, sleep_s: float = 10.0) -> None:
        self.cleanup_s = cleanup_s
        self.instant = instant  # items below it return at once
        self.sleep_s = sleep_s
        self._lock = threading.Lock()
        self.started: set[int] = set()
        self.cancelled: set[int] = set()
        self.all_started = threading.Event()
        self.expect = 0

    async def __call__(self, x: int) -> int:
        if x < self.instant:
            return x
        with self._lock:
            self.started.add(x)
            if len(self.started) == self.expect:
                self.all_started.set()
        try:
            await asyncio.sleep(self.sleep_s)
        finally:
            if self.cleanup_s:
                await asyncio.sleep(self.cleanup_s)
            with self._lock:
                self.cancelled.add(x)
        return x


@pytest.mark.parametrize("cleanup_s", [0.0, 0.05])
@pytest.mark.parametrize("in_order", [True, False])
@pytest.mark.parametrize("end", ["close", "with", "gc"])
def test_pending_coroutines_are_cancelled_and_awaited_on_close(in_order: bool, end: str, cleanup_s: float) -> None:
    fn = CancellationRecorder(cleanup_s)
    fn.expect = 3
    node = dp.AsyncFetcher(range(10), fn, max_concurrency=4, in_order=in_order)
    it = iter(node)
    assert next(it) == 0  # items 1, 2 and 3 now sleep on the loop
    assert fn.all_started.wait(5)
    if end == "close":
        it.close()
    elif end == "with":
        with it:
            pass
    else:
        del it
        collect()
    # Their `finally` blocks ran before close returned: cancelled AND awaited.
    assert fn.cancelled == fn.started == {1, 2, 3}

    async def tasks_left() -> int:
        return len(asyncio.all_tasks()) - 1  # not counting this one

    assert node.event_loop().run(tasks_left(), timeout=5) == 0
    node.close()


def test_closing_the_node_cancels_and_awaits_an_epoch_in_flight() -> None:
    fn = CancellationRecorder(cleanup_s=0.05)
    fn.expect = 2
    node = dp.AsyncFetcher(range(10), fn, max_concurrency=3)
    it = iter(node)
    assert next(it) == 0
    assert fn.all_started.wait(5)
    node.close()
    assert fn.cancelled == fn.started == {1, 2}
    with pytest.raises(RuntimeError, match="closed"):  # loudly, instead of waiting forever
        next(it)
    it.close()


def test_closing_a_thread_mapper_pulling_a_fetcher_cancels_its_coroutines() -> None:
    # iter() pulls the mapper's capacity (items 0 and 1, at once) in this thread; then its
    # worker, in the fetcher's next(), starts item 3 and waits for item 2. Items from 2 on end
    # only when cancelled: an item that finished and was then interrupted in its clean-up
    # (as with a 10 s sleep under load) would leave `cancelled` short with nothing wrong.
    before = set(threading.enumerate())
    fn = CancellationRecorder(cleanup_s=0.05, instant=2, sleep_s=3600)
    fn.expect = 2
    fetch = dp.AsyncFetcher(range(10), fn, max_concurrency=3)
    it = iter(fetch.map(lambda x: x, num_threads=1))
    assert next(it) == 0
    assert fn.all_started.wait(5)  # items 2 and 3: the worker is in the fetcher's next()
    it.close()
    assert fn.cancelled == fn.started and {2, 3} <= fn.started
    assert [t.name for t in new_threads(before)] == ["AsyncFetcher-loop"]
    fetch.close()


# -- thread pools kept across epochs --------------------------------------------------------


def test_thread_mapper_on_a_pool_runs_each_epoch_on_the_pools_threads() -> None:
    pool = dp.ThreadPool(3, name="pool")
    try:
        before = set(threading.enumerate())
        names: set[str] = set()
        lock = threading.Lock()

        def fn(x: int) -> int:
            with lock:
                names.add(threading.current_thread().name)
            return x

        node = dp.ThreadMapper(range(30), fn, num_threads=3, pool=pool)
        assert list(node) == list(range(30))
        it = iter(node)
        next(it)
        it.close()
        assert list(node) == list(range(30))
        assert names <= {"pool-0", "pool-1", "pool-2"}
        assert new_threads(before) == []  # no thread of its own
    finally:
        pool.close()
    assert [t for t in threading.enumerate() if t.name.startswith("pool-")] == []


# -- interpreter exit -----------------------------------------------------------------------

EXIT_SCRIPT = textwrap.dedent(
    """
    import asyncio, threading
    import datapipes as dp
    print("READY", flush=True)

    async def sleep_forever_at_3(x):
        if x == 3:
            try:
                await asyncio.sleep(3600)
            finally:  # the exit hook cancels the coroutine and awaits its clean-up
                await asyncio.sleep(0.01)
                print("cancelled", flush=True)
        return x

    # A full node: the consumer took one item and stopped.
    blocked = iter(dp.ThreadMapper(range(10_000), lambda x: x, num_threads=4, max_pending=2))
    next(blocked)
    # A fetcher with a coroutine sleeping forever, and one out of order.
    fetch = dp.AsyncFetcher(range(100), sleep_forever_at_3, max_concurrency=4)
    fetching = iter(fetch)
    [next(fetching) for _ in range(3)]
    unordered = iter(dp.AsyncFetcher(range(100), sleep_forever_at_3, max_concurrency=4, in_order=False))
    next(unordered)
    # A whole graph: a prefetcher whose thread waits on a fetcher waiting on that coroutine
    # (the fetcher pulls its mapper in the prefetcher's thread).
    graph = dp.Sampler(100).map(int, num_threads=2).async_map(sleep_forever_at_3, max_concurrency=2).prefetch(2)
    whole = iter(graph)
    [next(whole) for _ in range(3)]
    print("threads", len(threading.enumerate()), flush=True)
    # Falls off the end with all of them referenced from module globals.
    """
)


def test_a_pipeline_still_referenced_at_exit_does_not_hang_the_interpreter() -> None:
    result = run_timed(EXIT_SCRIPT, 60)
    assert result.returncode == 0, result
    first, *rest = result.lines
    assert first.startswith("threads ")
    assert int(first.split()[1]) > 10  # the pipelines really were running
    assert rest == ["cancelled"] * 3  # no coroutine was left pending: each was cancelled
    assert "Traceback" not in result.stderr, result.stderr
    assert "Warning" not in result.stderr, result.stderr


def test_open_gives_the_epoch_without_its_handle_and_its_owner_closes_it() -> None:
    node = dp.Sampler(10).map(lambda x: x * 2, num_threads=2)
    it = node.open()
    assert not isinstance(it, type(iter(dp.Sampler(1))))  # not the handle iter() returns
    assert [next(it) for _ in range(3)] == [0, 2, 4]
    assert it.state_dict()["source"]["yielded"] >= 3
    assert it.shutdown(5.0) is True  # every thread stopped within the bound
    assert not [t for t in threading.enumerate() if t.name.startswith("ThreadMapper")]
    with pytest.raises(StopIteration):
        next(it)


def test_close_while_a_worker_thread_is_starting_stops_every_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """Thread 1 starts thread 2 first thing; a shutdown while thread 2's start is slow must not
    find a thread it cannot join (it raised "cannot join thread before it is started")."""
    start = threading.Thread.start

    def slow_start(self: threading.Thread) -> None:
        if self.name.endswith("-2"):
            time.sleep(0.2)
        start(self)

    monkeypatch.setattr(threading.Thread, "start", slow_start)
    it = dp.IterableWrapper(range(100)).map(lambda i: i, num_threads=4).open()
    time.sleep(0.05)  # thread 1 is inside the start of thread 2
    it.shutdown(0, warn=False)  # no wait: straight to joining what was started
    deadline = time.monotonic() + 5
    while [t for t in threading.enumerate() if t.name.startswith("ThreadMapper")] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not [t for t in threading.enumerate() if t.name.startswith("ThreadMapper")]


def test_a_collection_during_a_worker_threads_start_closes_the_run_without_a_hang() -> None:
    """A garbage collection while a ThreadMapper starts a worker thread may run the finalizer
    of a dropped epoch whose source is that ThreadMapper: it must not wait for a lock the
    starting thread holds (it hung, also at interpreter exit), nor join a thread not started."""
    code = textwrap.dedent(
        """
        import gc, random, time
        import datapipes as dp
        print("READY", flush=True)
        gc.set_threshold(1, 1, 1)
        for _ in range(150):
            inner = dp.ThreadMapper(range(64), lambda x: x, num_threads=16)
            it = iter(dp.ThreadMapper(inner, lambda x: x, num_threads=1, max_pending=0))
            cycle = [it]
            cycle.append(cycle)
            gc.disable()
            del it, cycle  # garbage, collected by the next thread that allocates once gc is on
            time.sleep(random.random() * 0.0005)
            gc.enable()
            time.sleep(0.002)
        print("done")
        """
    )
    done = run_timed(code, 90)
    assert done.returncode == 0 and done.lines == ["done"], done
    assert "cannot join thread" not in done.stderr, done.stderr[-2000:]


def test_tracked_threads_can_be_listed_while_other_threads_drop_theirs() -> None:
    # The exit hook lists the tracked threads while any other thread may drop its last
    # reference to one. A weakref.WeakSet raised "Set changed size during iteration" there on
    # a free-threaded build (its removal callback checks, then changes, a Python-level guard).
    from datapipes import _lifecycle

    stop = threading.Event()

    class Unstarted(threading.Thread):
        def __init__(self) -> None:  # a thread object that is never started: no set-up needed
            pass

    def churn() -> None:
        held: collections.deque[threading.Thread] = collections.deque()
        while not stop.is_set():  # about 2,000 tracked each, the oldest dropped here
            thread = Unstarted()
            _lifecycle.track_thread(thread)
            held.append(thread)
            if len(held) > 2_000:
                held.popleft()

    churners = [threading.Thread(target=churn, name=f"churn-{i}") for i in range(2)]
    for t in churners:
        t.start()
    errors: list[tuple[int, BaseException]] = []
    try:
        for i in range(500):
            try:
                listed = _lifecycle.tracked_threads()
            except RuntimeError as exc:
                errors.append((i, exc))
                break
            assert all(isinstance(t, threading.Thread) for t in listed)
            del listed  # held on, the threads listed die on this thread later (slow on 3.13t)
    finally:
        stop.set()
        for t in churners:
            t.join()
    assert errors == []


def test_a_submit_that_passed_its_check_runs_although_close_came_before_it_put_its_task() -> None:
    # ThreadPool.submit checked "closed" under its lock but put its task after releasing it: a
    # close() in between put the threads' stop first, the task behind it never ran and its
    # future never resolved (a map_window waiting on it hung). Forced here: the put waits.
    pool = dp.ThreadPool(1, name="put-race")
    inbox = pool._inboxes[0]
    entered, go = threading.Event(), threading.Event()
    put = inbox.put

    def slow_put(item: Any, *args: Any, **kwargs: Any) -> None:
        if isinstance(item, tuple):  # a task, not the stop
            entered.set()
            go.wait(10)
        put(item, *args, **kwargs)

    inbox.put = slow_put  # type: ignore[method-assign]
    futures: list[Any] = []
    submitter = threading.Thread(target=lambda: futures.append(pool.submit(lambda: 42)))
    submitter.start()
    assert entered.wait(10)
    closer = threading.Thread(target=pool.close, args=(10,))
    closer.start()
    while not pool._closed:
        time.sleep(0.01)
    time.sleep(0.1)  # close() is past its flag: before the fix, its stop was already queued
    go.set()
    submitter.join(10)
    closer.join(15)
    assert futures[0].result(timeout=10) == 42
    assert not closer.is_alive() and not [t for t in pool.threads if t.is_alive()]


class _ClosesOnTake(collections.deque):  # type: ignore[type-arg]
    """A ready queue whose next ``popleft()`` first lets another thread close the epoch."""

    closer: Any = None

    def popleft(self) -> Any:
        if self.closer is not None:
            closer, self.closer = self.closer, None
            thread = threading.Thread(target=closer, args=(5.0,))
            thread.start()
            thread.join()
        return super().popleft()


def test_a_close_between_the_out_of_order_check_and_the_take_is_a_closed_epoch() -> None:
    # next() checked the out-of-order ready queue, then popped it: a close from another thread
    # in between cleared it, and IndexError came out of next() (found in review).
    it = dp.ThreadMapper(range(100), lambda x: x, num_threads=2, in_order=False).open()
    next(it)
    run = it._run  # type: ignore[attr-defined]
    ready = _ClosesOnTake(run.ready_fifo)
    ready.closer = run.shutdown
    run.ready_fifo = ready
    with pytest.raises(dp.EpochClosedError):  # as any next() a close from another thread meets
        next(it)
    assert not [t for t in threading.enumerate() if t.name.startswith("ThreadMapper")]


def test_a_generator_busy_in_the_feed_at_close_is_closed_once_the_feed_is_out() -> None:
    # A worker's feed is inside a generator's next() (under a sync node, Batcher) when another
    # thread closes the epoch: the generator refuses close() (ValueError) and the dispatcher
    # closes its source again once the feed is out. The sync node had marked itself closed
    # before the refusal, so that second close did nothing and the generator stayed open
    # until collected (found in review).
    inside, release = threading.Event(), threading.Event()
    closed: list[bool] = []

    def gen() -> Iterator[int]:
        try:
            for i in range(200):
                if threading.current_thread() is not threading.main_thread() and not inside.is_set():
                    inside.set()  # the first pull on a worker's feed waits here
                    release.wait(10)
                yield i
        finally:
            closed.append(True)

    it = dp.ThreadMapper(dp.IterableWrapper(gen()).batch(2), len, num_threads=1).open()

    def close_while_the_feed_is_inside() -> None:
        assert inside.wait(10)
        releaser = threading.Timer(0.2, release.set)  # while shutdown() waits for the feed
        releaser.start()
        it.shutdown(10)
        releaser.join()

    closer = threading.Thread(target=close_while_the_feed_is_inside)
    closer.start()
    with pytest.raises(dp.EpochClosedError):
        for _ in range(100):
            next(it)
    closer.join()
    assert closed == [True]  # by the close, not by the collector
