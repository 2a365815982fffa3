"""Lifecycle: nothing hangs, freezes or leaks.

Each test stages one situation that was seen to hang, freeze or leak. What may hang runs in a
subprocess with a timeout (``subprocess.TimeoutExpired`` fails the test) or under
``pytest.mark.timeout``. The only time bounds are hang detectors, far above what a working
loader needs; none measures speed.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import sys
import threading
import time
import warnings

import pytest
import torch
from torch.utils.data import DataLoader

import datapipes as dp
from tests.fixtures.datasets import FailsAt, GateAt, RangeDataset, Shards
from tests.fixtures.scripts import run_timed
from tests.fixtures.threads import loader_threads, patch_join_timeout, wait_for_no_loader_threads, wait_until_blocked
from tests.fixtures.workers import GatedStream
from torch_threadloader import ThreadLoader

#: Imported by every subprocess script.
PRELUDE = """
import asyncio, atexit, gc, os, signal, sys, threading, time, warnings
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset
from torch_threadloader import ThreadLoader
print("READY", time.time(), flush=True)
"""


def script(body: str) -> str:
    import textwrap

    return PRELUDE + textwrap.dedent(body)


def assert_ok(proc, *expected_lines: str) -> None:
    assert proc.returncode == 0, repr(proc)
    for line in expected_lines:
        assert line in proc.stdout, f"{line!r} missing\n{proc!r}"


# -- an error caught by the user, then gc and exit ---------------------------------------------


def test_caught_dataset_error_then_gc_does_not_freeze_and_exit_is_prompt():
    """Was: gc.collect() froze 30 s (the loader's finalizer joined the pool before the epoch
    was closed), then exit took 32 s. The dataset keeps its exception objects, so the
    traceback (and the frames with the loader and its iterator) form a cycle that only the
    collector frees."""
    proc = run_timed(
        script("""
        class FailingAt(Dataset):
            def __init__(self):
                self.errors = {5: ValueError("bad item 5")}
            def __len__(self):
                return 64
            def __getitem__(self, i):
                time.sleep(0.002)
                if i in self.errors:
                    raise self.errors[i]
                return i

        def run():
            loader = ThreadLoader(FailingAt(), batch_size=1, num_workers=2)
            try:
                for b in loader:
                    pass
            except ValueError:
                pass

        run()
        start = time.monotonic()
        gc.collect()
        print(f"GC_SECONDS {time.monotonic() - start:.2f}", flush=True)
        print("DONE", flush=True)
    """),
        15,
    )  # hang detector: the bug took 30 s in gc.collect(), then 32 s to exit
    assert_ok(proc, "DONE")
    gc_seconds = float(proc.stdout.split("GC_SECONDS ")[1].split()[0])
    assert gc_seconds < 10, proc.stdout


def test_exit_is_prompt_with_an_item_stuck_and_item_concurrency():
    """Was: exit never ended (item threads were not daemons, and exit joined them)."""
    proc = run_timed(
        script("""
        class StuckAt(Dataset):
            def __init__(self):
                self.gate = threading.Event()
            def __len__(self):
                return 16
            def __getitem__(self, i):
                if i == 1:
                    self.gate.wait()  # never set
                return i

        loader = ThreadLoader(StuckAt(), batch_size=4, num_workers=1, item_concurrency=4, timeout=1)
        it = iter(loader)
        try:
            next(it)
        except Exception as exc:
            print("RAISED", type(exc).__name__, flush=True)
        print("EXITING", flush=True)
    """),
        15,
    )
    assert_ok(proc, "RAISED", "EXITING")


# -- BaseExceptions and Ctrl-C on the async path -----------------------------------------------


@pytest.mark.parametrize("exc_name", ["SystemExit", "KeyboardInterrupt"])
def test_base_exception_in_async_getitem_is_raised_by_next(exc_name):
    """Was: the exception killed the event loop and next() waited forever. Spec: next()
    raises that exception, or an error carrying it (as __cause__ or __context__)."""
    proc = run_timed(
        script(f"""
        class Dies(Dataset):
            def __len__(self):
                return 8
            async def __getitem__(self, i):
                await asyncio.sleep(0)
                if i == 2:
                    raise {exc_name}("from the dataset")
                return i

        loader = ThreadLoader(Dies(), batch_size=1, num_workers=1)
        it = iter(loader)
        got = []
        try:
            for b in it:
                got.append(int(b))
        except BaseException as exc:
            chain = [type(e).__name__ for e in (exc, exc.__cause__, exc.__context__) if e is not None]
            print("RAISED", " ".join(chain), "after", got, flush=True)
        loader.close()
        print("DONE", flush=True)
    """),
        20,
    )
    assert_ok(proc, "RAISED", "DONE")
    raised_line = next(line for line in proc.stdout.splitlines() if line.startswith("RAISED"))
    assert exc_name in raised_line, raised_line
    assert "after [0, 1]" in raised_line, raised_line


@pytest.mark.parametrize("stuck", ["awaits", "blocks_the_loop"])
def test_ctrl_c_on_a_stuck_async_item_interrupts_and_exit_is_prompt(stuck):
    """A timer thread sends SIGINT while the main thread waits in next() on an async item
    that never finishes: awaiting forever (cancellable), or blocking the loop thread itself
    (not cancellable). KeyboardInterrupt reaches the caller and the process exits at once."""
    hang = "await asyncio.Event().wait()" if stuck == "awaits" else "threading.Event().wait()"
    proc = run_timed(
        script(f"""
        class Stuck(Dataset):
            def __len__(self):
                return 8
            async def __getitem__(self, i):
                if i == 0:
                    {hang}
                return i

        loader = ThreadLoader(Stuck(), batch_size=1, num_workers=2)
        it = iter(loader)
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
        try:
            next(it)
        except KeyboardInterrupt:
            print("KEYBOARD_INTERRUPT", flush=True)
        print("EXITING", flush=True)
    """),
        10,
    )
    assert_ok(proc, "KEYBOARD_INTERRUPT", "EXITING")


# -- pin_memory on a machine with an accelerator -----------------------------------------------


def test_pin_memory_with_an_iterable_dataset_and_workers_runs_where_pinning_is_available(monkeypatch):
    """Pinning made an identity; the accelerator said present: iteration must give torch's batches."""
    ref = [b.tolist() for b in DataLoader(Shards(10, pause=None), batch_size=2, num_workers=2)]
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self, *args, **kwargs: self)
    monkeypatch.setattr(torch.Tensor, "is_pinned", lambda self, *args, **kwargs: True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "no accelerator" warning: pinning really runs
        with ThreadLoader(Shards(10, pause=None), batch_size=2, num_workers=2, pin_memory=True) as loader:
            got = [b.tolist() for b in loader]
    assert got == ref


# -- fork ----------------------------------------------------------------------------------------


def test_a_forked_child_iterates_a_loader_its_parent_used():
    """The child has none of the parent's threads: it must start its own (or load without
    them), not wait on threads that do not exist. The parent waits with a deadline."""
    proc = run_timed(
        script("""
        class R(Dataset):
            def __len__(self):
                return 12
            def __getitem__(self, i):
                return i

        loader = ThreadLoader(R(), batch_size=3, num_workers=2)
        assert [b.tolist() for b in loader] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]]
        warnings.simplefilter("ignore", DeprecationWarning)  # fork() with threads alive
        pid = os.fork()
        if pid == 0:
            ok = [b.tolist() for b in loader] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]]
            os._exit(0 if ok else 3)
        deadline = time.monotonic() + 10
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                print("CHILD_HUNG", flush=True)
                sys.exit(1)
            time.sleep(0.05)
        print("CHILD_EXIT", os.waitstatus_to_exitcode(status), flush=True)
        assert [b.tolist() for b in loader] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]]
        loader.close()
        print("DONE", flush=True)
    """),
        30,
    )
    assert_ok(proc, "CHILD_EXIT 0", "DONE")


def test_a_loader_used_inside_torchs_worker_processes():
    """torch's DataLoader(num_workers=1) forks a worker whose __getitem__ iterates a
    ThreadLoader the parent already used once."""
    proc = run_timed(
        script("""
        class R(Dataset):
            def __len__(self):
                return 8
            def __getitem__(self, i):
                return i

        inner = ThreadLoader(R(), batch_size=4, num_workers=2)
        assert len(list(inner)) == 2  # used once in the parent: its threads exist there

        class Outer(Dataset):
            def __len__(self):
                return 3
            def __getitem__(self, i):
                return sum(int(b.sum()) for b in inner)

        out = [int(x) for x in DataLoader(Outer(), batch_size=None, num_workers=1)]
        print("OUT", out, flush=True)
        inner.close()
    """),
        30,
    )
    assert_ok(proc, "OUT [28, 28, 28]")


# -- close() from another thread ------------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("closer", ["loader", "iterator"])
def test_close_from_another_thread_makes_the_waiting_loop_raise(closer):
    """The main thread waits in next() (batch 3 is gated) when another thread closes the
    loader or the epoch iterator: the for-loop must raise, not end as if the epoch were
    complete (rule 3: no epoch that ends short without raising)."""
    ds = GateAt(20, gated={3})
    loader = ThreadLoader(ds, batch_size=1, num_workers=2)
    it = iter(loader)
    seen: list[int] = []
    errors: list[BaseException] = []

    main = threading.get_native_id()

    def close_while_waiting() -> None:
        while len(seen) < 3 or not ds.stuck:
            time.sleep(0.01)
        wait_until_blocked(main)  # the main thread is now inside next(), waiting for batch 3
        threading.Timer(1.0, ds.gate.set).start()  # lets the stuck call return during close()
        try:
            (loader if closer == "loader" else it).close()
        except BaseException as exc:  # reported below
            errors.append(exc)

    closer_thread = threading.Thread(target=close_while_waiting)
    closer_thread.start()
    raised: BaseException | None = None
    try:
        for batch in it:
            seen.append(int(batch))
    except Exception as exc:  # any exception is the spec
        raised = exc
    finally:
        ds.gate.set()
        closer_thread.join()
        loader.close()
    assert errors == []
    assert seen == [0, 1, 2]
    assert raised is not None, "the epoch ended silently after close() from another thread"


# -- a kept exception does not keep its epoch ----------------------------------------------------


@pytest.mark.timeout(60)
def test_an_exception_kept_by_the_caller_does_not_keep_the_epochs_threads():
    """persistent_workers=False: the epoch owns its threads; once the iterator is dropped
    they go, even while the caller still holds the exception (and its traceback)."""
    loader = ThreadLoader(FailsAt(40, bad={3}, base_s=0.002), batch_size=1, num_workers=2)
    it = iter(loader)
    kept = None
    try:
        while True:
            next(it)
    except ValueError as exc:
        kept = exc
    del it
    gc.collect()
    survivors = wait_for_no_loader_threads(3.0)
    try:
        assert kept is not None and kept.__traceback__ is not None
        assert survivors == [], survivors
    finally:
        del kept
        loader.close()


# -- a stuck IterableDataset call and close() ----------------------------------------------------


@pytest.mark.timeout(45)
@pytest.mark.parametrize("block_in", ["iter", "next"])
def test_close_after_a_stuck_iterable_call_returns_and_the_next_epoch_works(monkeypatch, block_in):
    """Worker 0 blocks (in __iter__, or in its generator's first next()); next() times out;
    with the epoch still open, loader.close() must not raise (a RuntimeWarning naming the
    stuck thread is fine) and return within about one join timeout (patched to 1 s; the bug
    waited the unpatched 30 s, or raised); once the call is released, a new epoch yields all
    the data (the pool is not left marked busy)."""
    patch_join_timeout(monkeypatch.setattr, 1.0)
    ds = GatedStream(10, block_in=block_in)
    loader = ThreadLoader(ds, batch_size=None, num_workers=2, timeout=1)
    try:
        it = iter(loader)
        with pytest.raises(TimeoutError):
            next(it)  # batch 0 is worker 0's, which is stuck
        start = time.monotonic()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            loader.close()  # must not raise
        closing_s = time.monotonic() - start
        ds.gate.set()
        assert closing_s < 10, closing_s  # hang detector
        with pytest.raises(StopIteration):
            next(it)  # closed with the loader
        del it
        loader.timeout = 30  # 1 s bounded the stuck call; this epoch's items may be slower under load
        got = sorted(int(x) for x in loader)
        assert got == list(range(10))
    finally:
        ds.gate.set()
        loader.close()


# -- aclose() at interpreter exit ------------------------------------------------------------------


def test_aclose_of_an_async_dataset_is_awaited_at_interpreter_exit():
    proc = run_timed(
        script("""
        class AsyncRange(Dataset):
            def __len__(self):
                return 8
            async def __getitem__(self, i):
                await asyncio.sleep(0)
                return i
            async def aclose(self):
                await asyncio.sleep(0)
                print("ACLOSED", flush=True)

        loader = ThreadLoader(AsyncRange(), batch_size=2, num_workers=2)
        it = iter(loader)
        print("FIRST", next(it).tolist(), flush=True)
        # exits without closing the loader or the iterator
    """),
        20,
    )
    assert_ok(proc, "FIRST [0, 1]", "ACLOSED")


# -- AsyncFetcher out of order: bounded behind a stuck item, and a thread-safe state_dict ----------


@pytest.mark.timeout(60)
def test_async_fetcher_out_of_order_stays_bounded_behind_one_stuck_item(close_after):
    """Item 0 never finishes; the others finish at once. Pulls from the source stay within a
    small multiple of max_concurrency (the checkpoint state stays bounded too), so the
    consumer eventually waits, and timeout= turns that wait into a TimeoutError."""
    max_concurrency = 4
    pulls = itertools.count()
    pulled = [0]

    def source():
        for i in range(100_000):
            pulled[0] = next(pulls) + 1
            yield i

    async def fetch(i):
        if i == 0:
            await asyncio.Event().wait()  # never set
        return i

    node = dp.AsyncFetcher(source(), fetch, max_concurrency=max_concurrency, in_order=False, timeout=1.0)
    close_after.append(node)
    it = iter(node)
    consumed = 0
    try:
        with pytest.raises(TimeoutError):
            for _ in range(2_000):
                next(it)
                consumed += 1
    finally:
        it.close()
    assert pulled[0] <= 8 * max_concurrency, (pulled[0], consumed)


@pytest.mark.timeout(60)
def test_async_fetcher_state_dict_from_another_thread_does_not_race(close_after):
    async def fetch(i):
        if i % 7 == 0:
            await asyncio.sleep(0.001)
        return i

    errors: list[BaseException] = []
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for in_order in (False, True):
            node = dp.AsyncFetcher(dp.Sampler(300), fetch, max_concurrency=8, in_order=in_order)
            close_after.append(node)
            it = iter(node)
            done = threading.Event()

            def snapshot(it=it, done=done) -> None:
                while not done.is_set():
                    try:
                        it.state_dict()
                    except BaseException as exc:  # collected for the assertion
                        errors.append(exc)
                        return

            reader = threading.Thread(target=snapshot)
            reader.start()
            try:
                got = sorted(it)
            finally:
                done.set()
                reader.join()
                it.close()
            assert got == list(range(300))
    finally:
        sys.setswitchinterval(old)
    assert errors == [], errors


# -- after close(), next() raises StopIteration ---------------------------------------------------


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("kind", ["map", "iterable"])
def test_next_after_iterator_close_raises_stop_iteration(num_workers, kind):
    dataset = RangeDataset(20) if kind == "map" else Shards(20, pause=None)
    with ThreadLoader(dataset, batch_size=2, num_workers=num_workers) as loader:
        it = iter(loader)
        next(it)
        it.close()
        with pytest.raises(StopIteration):
            next(it)
        with pytest.raises(StopIteration):
            next(it)


# -- close and join timeouts do not add up ---------------------------------------------------------


def test_close_with_all_workers_stuck_is_bounded_by_one_join_timeout():
    """Four workers stuck in __getitem__; DEFAULT_JOIN_TIMEOUT patched to 1 s: the whole
    close() returns within about one timeout (not one per worker, not one per layer: the
    unpatched bug waited 30 s or more), and each stuck thread is named once in a RuntimeWarning."""
    proc = run_timed(
        script("""
        from tests.fixtures.datasets import GateAt
        from tests.fixtures.threads import patch_join_timeout

        patch_join_timeout(setattr, 1.0)
        ds = GateAt(40, gated={0, 1, 2, 3})
        loader = ThreadLoader(ds, batch_size=1, num_workers=4)
        it = iter(loader)
        deadline = time.monotonic() + 10
        while len(ds.stuck) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        print("STUCK", len(ds.stuck), flush=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            start = time.monotonic()
            loader.close()
            print(f"CLOSE_SECONDS {time.monotonic() - start:.2f}", flush=True)
        runtime = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
        for name in sorted(ds.stuck):
            print("NAMED", name, sum(name in message for message in runtime), flush=True)
        ds.gate.set()
        del it
    """),
        15,
    )  # unpatched, the bug waited 30 s or more
    assert_ok(proc, "STUCK 4")
    close_s = float(proc.stdout.split("CLOSE_SECONDS ")[1].split()[0])
    assert close_s < 3.0, proc.stdout  # one 1 s timeout plus slack; four in a row would be 4 s+
    named = [line.split() for line in proc.stdout.splitlines() if line.startswith("NAMED")]
    assert len(named) == 4, proc.stdout
    assert all(count == "1" for _, _, count in named), proc.stdout


# -- break / del / gc of an epoch iterator ---------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", ["break", "del", "gc"])
def test_an_abandoned_epoch_leaves_no_thread_without_persistent_workers(how):
    loader = ThreadLoader(GateAt(200, gated=set(), base_s=0.002), batch_size=1, num_workers=2)
    try:
        if how == "break":
            for i, _ in enumerate(loader):
                if i == 3:
                    break
        else:
            it = iter(loader)
            next(it)
            if how == "gc":
                cycle = [it]
                cycle.append(cycle)
                del cycle
            del it
        gc.collect()
        assert wait_for_no_loader_threads(3.0) == []  # the epoch owned its threads
    finally:
        loader.close()


@pytest.mark.timeout(60)
def test_persistent_workers_keep_their_threads_until_loader_close():
    loader = ThreadLoader(RangeDataset(40), batch_size=2, num_workers=2, persistent_workers=True)
    for i, _ in enumerate(loader):
        if i == 2:
            break
    gc.collect()
    list(loader)
    time.sleep(0.2)
    assert len([t for t in loader_threads() if "worker" in t]) >= 2  # kept for the next epoch
    loader.close()
    assert wait_for_no_loader_threads(3.0) == []


# -- interpreter exit mid-epoch --------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["map", "iterable", "async", "map_item_concurrency"])
def test_interpreter_exit_mid_epoch_is_prompt_and_clean(kind):
    proc = run_timed(
        script(f"""
        kind = {kind!r}

        def left():  # registered before the loader's exit hook, so it runs after it
            names = [t.name for t in threading.enumerate() if t.name.startswith("threadloader") and t.is_alive()]
            print("LEFT", names, flush=True)

        atexit.register(left)

        class SlowMap(Dataset):
            def __len__(self):
                return 1000
            def __getitem__(self, i):
                time.sleep(0.01)
                return i

        class SlowStream(IterableDataset):
            def __iter__(self):
                for i in range(1000):
                    time.sleep(0.01)
                    yield i

        class SlowAsync(Dataset):
            def __len__(self):
                return 1000
            async def __getitem__(self, i):
                await asyncio.sleep(0.01)
                return i

        dataset = {{"map": SlowMap, "iterable": SlowStream, "async": SlowAsync,
                    "map_item_concurrency": SlowMap}}[kind]()
        loader = ThreadLoader(dataset, batch_size=4, num_workers=2,
                              item_concurrency=4 if kind == "map_item_concurrency" else 1)
        it = iter(loader)
        next(it)
        next(it)
        print("MID_EPOCH", flush=True)
    """),
        10,
    )
    assert_ok(proc, "MID_EPOCH")
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "LEFT []" in proc.stdout, proc.stdout  # the exit hook stopped every thread it made


# -- found in review of the rebuilt core -----------------------------------------------------------


@pytest.mark.parametrize("num_workers", [0, 2])
def test_an_epoch_of_a_loader_nobody_keeps_still_yields_everything(num_workers):
    """``next(iter(ThreadLoader(...)))``: the loader is collected at once; its epoch keeps it."""
    first = next(iter(ThreadLoader(RangeDataset(8), batch_size=4, num_workers=num_workers)))
    assert first.tolist() == [0, 1, 2, 3]
    assert [b.tolist() for b in ThreadLoader(RangeDataset(8), batch_size=4, num_workers=num_workers)] == [
        [0, 1, 2, 3],
        [4, 5, 6, 7],
    ]
    gc.collect()
    assert wait_for_no_loader_threads(3.0) == []


def test_close_drops_the_items_queued_for_a_thread_instead_of_running_them():
    calls = itertools.count()
    started = []

    def slow(x: int) -> int:
        started.append(next(calls))
        time.sleep(0.3)
        return x

    it = iter(dp.ThreadMapper(range(8), slow, num_threads=1, max_pending=3))
    assert next(it) == 0
    it.close()  # items 1 .. 3 are queued for the one thread: at most the running one finishes
    assert len(started) <= 2, started


@pytest.mark.timeout(60)
def test_a_worker_thread_that_cannot_start_makes_every_next_raise(monkeypatch):
    real_start = threading.Thread.start

    def start(self):
        if self.name == "threadloader-worker-1":
            raise RuntimeError("can't start new thread")
        return real_start(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    loader = ThreadLoader(RangeDataset(12), batch_size=2, num_workers=2)
    it = iter(loader)
    outcomes = []
    for _ in range(4):
        try:
            outcomes.append(next(it).tolist())
        except RuntimeError as exc:
            outcomes.append(type(exc).__name__)
    monkeypatch.undo()
    loader.close()
    assert "RuntimeError" in outcomes
    after_error = outcomes[outcomes.index("RuntimeError") :]
    assert after_error == ["RuntimeError"] * len(after_error)  # never a hang, never a short epoch
    assert wait_for_no_loader_threads(3.0) == []


def test_closing_a_graph_passes_the_bound_to_its_sources():
    """``shutdown(0.3)`` of a graph whose source's one thread is stuck in a call returns
    ``False`` (a call still runs) instead of waiting for the call: the bound reaches the
    sources. The call waits at a gate until the test opens it, after the shutdown."""
    inside, gate = threading.Event(), threading.Event()

    def stuck(x: int) -> int:
        inside.set()
        gate.wait(60)
        return x

    it = iter(dp.Prefetcher(dp.ThreadMapper(range(4), stuck, num_threads=1, max_pending=0), depth=1))
    try:
        assert inside.wait(60)  # the mapper's one thread is inside the call
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            stopped = it.shutdown(0.3)
        assert stopped is False  # a call is still running: said so, not waited for (the gate is shut)
    finally:
        gate.set()  # the call ends, so no thread outlives the test


def test_a_forked_child_closes_a_loader_with_a_live_epoch_at_once():
    proc = run_timed(
        script("""
        loader = ThreadLoader(list(range(64)), batch_size=2, num_workers=2)
        it = iter(loader)
        next(it)
        pid = os.fork()
        if pid == 0:
            start = time.monotonic()
            loader.close()
            os.write(1, f"CHILD_CLOSE {time.monotonic() - start:.2f}\\n".encode())
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        print("CHILD_STATUS", status, flush=True)
        loader.close()
    """),
        30,
    )
    assert_ok(proc, "CHILD_STATUS 0")
    child_close = float(proc.stdout.split("CHILD_CLOSE ")[1].split()[0])
    assert child_close < 5, proc.stdout  # hang detector: the parent's threads are not waited for


@pytest.mark.timeout(60)
def test_a_persistent_worker_stuck_in_a_call_does_not_stall_the_next_epoch():
    ds = GateAt(8, gated={0})
    loader = ThreadLoader(ds, batch_size=1, num_workers=2, persistent_workers=True, timeout=0.5)
    try:
        it = iter(loader)
        with pytest.raises(TimeoutError):
            next(it)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            patch_join_timeout(lambda m, n, v: setattr(m, n, v), 0.5)
            it.close()  # worker 0 is still inside ds[0]
        ds.gated.clear()  # the workers' shallow copies share this set
        # 0.5 s bounded the stuck item; a batch of the next epoch may take longer than that on a
        # loaded machine, and a batch queued behind the stuck call waits forever: 30 s tells them apart
        loader.timeout = 30
        assert [int(b) for b in loader] == list(range(8))  # not queued behind the stuck call
    finally:
        patch_join_timeout(lambda m, n, v: setattr(m, n, v), 30.0)
        ds.gate.set()
        loader.close()


def test_two_live_epochs_start_each_persistent_worker_once():
    calls = []
    lock = threading.Lock()

    def init(worker_id: int) -> None:
        with lock:
            calls.append(worker_id)
        time.sleep(0.05)

    with ThreadLoader(
        RangeDataset(16), batch_size=2, num_workers=2, persistent_workers=True, worker_init_fn=init
    ) as loader:
        pairs = list(zip(loader, loader, strict=True))
        list(loader)
    assert len(pairs) == 8
    assert sorted(calls) == [0, 1]  # once per worker for the loader's life
