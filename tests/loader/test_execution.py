"""How ThreadLoader runs: threads, bounds, errors, timeouts, Ctrl-C, worker info, clean exit."""

from __future__ import annotations

import gc
import os
import random
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import datapipes as dp
import torch_threadloader
from tests.fixtures.datasets import (
    FileGate,
    GateAt,
    GetItemsDataset,
    RaisesSameAt,
    RangeDataset,
    SlowAt,
    WaitsForFileAt,
)
from tests.fixtures.threads import loader_threads, wait_until, wait_until_blocked
from tests.fixtures.values import assert_same
from torch_threadloader import ThreadLoader


class ThreadRecorder(Dataset):
    """``ds[i] == i``; records the name of the thread that loaded each item."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.lock = threading.Lock()
        self.threads: list[str] = []

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        with self.lock:
            self.threads.append(threading.current_thread().name)
        return i


@pytest.mark.parametrize("stall_report_after", [None, 300])
def test_num_workers_0_loads_in_the_callers_thread_without_threads(stall_report_after):
    """No thread loads: with stall reports on (the default) the epoch's one thread watches
    the caller's ``next()`` (``threadloader-stall-watch``), and with them off there is none."""
    ds = ThreadRecorder(10)
    before = {t.name for t in threading.enumerate()}
    with ThreadLoader(ds, batch_size=3, stall_report_after=stall_report_after) as loader:
        for _ in loader:
            added = {t.name for t in threading.enumerate()} - before
            assert added == (set() if stall_report_after is None else {"threadloader-stall-watch"})
    assert set(ds.threads) == {threading.current_thread().name}


def test_each_epoch_owns_its_threads_without_persistent_workers():
    ds = ThreadRecorder(40)
    with ThreadLoader(ds, batch_size=2, num_workers=3, worker_copy="shallow") as loader:
        it = iter(loader)
        next(it)

        # Started at iter(): thread i starts thread i + 1, so the last may take a moment.
        def workers() -> list[str]:
            return [name for name in loader_threads() if "worker" in name]

        deadline = time.monotonic() + 5
        while len(workers()) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert workers() == [f"threadloader-worker-{i}" for i in range(3)]
        list(it)
        assert loader_threads() == []  # gone when the epoch ends, as torch's worker processes
        assert set(ds.threads) <= {f"threadloader-worker-{i}" for i in range(3)}


def test_persistent_threads_are_kept_across_epochs_and_stopped_by_close():
    ds = ThreadRecorder(40)
    loader = ThreadLoader(ds, batch_size=2, num_workers=3, persistent_workers=True, worker_copy="shallow")
    list(loader)
    first = set(ds.threads)
    ds.threads.clear()
    list(loader)
    second = set(ds.threads)
    assert first <= {f"threadloader-worker-{i}" for i in range(3)}
    assert second <= {f"threadloader-worker-{i}" for i in range(3)}
    assert loader_threads() == [f"threadloader-worker-{i}" for i in range(3)]  # kept between epochs
    loader.close()
    assert loader_threads() == []
    loader.close()  # idempotent


def test_two_live_epochs_of_one_loader_do_not_deadlock():
    with ThreadLoader(RangeDataset(20), batch_size=2, num_workers=2) as loader:
        pairs = list(zip(loader, loader, strict=True))
    assert len(pairs) == 10
    assert all(torch.equal(a, b) for a, b in pairs)


@pytest.mark.parametrize("num_workers,prefetch_factor", [(1, 2), (2, 2), (3, 1), (2, 4)])
def test_at_most_workers_times_prefetch_batches_loading_or_waiting(num_workers, prefetch_factor):
    """Slow consumer, and one very slow batch: started-but-unconsumed never exceeds the bound."""
    bound = num_workers * prefetch_factor
    ds = SlowAt(60, slow_index=5, seconds=0.3, base=0.002)
    with ThreadLoader(ds, batch_size=1, num_workers=num_workers, prefetch_factor=prefetch_factor) as loader:
        peak = 0
        for consumed, batch in enumerate(loader, start=1):
            time.sleep(0.004)  # slow consumer
            with ds.lock:
                peak = max(peak, ds.started - consumed)
            assert batch.item() == consumed - 1
    assert peak <= bound
    assert ds.running.peak <= num_workers


def test_dataset_error_is_raised_for_its_batch_as_the_same_object_and_loading_goes_on():
    for num_workers in (0, 2):
        ds = RaisesSameAt(10, bad={2, 7})
        # worker_copy="shallow": the copies raise the dataset's own exception objects
        with ThreadLoader(ds, batch_size=2, num_workers=num_workers, worker_copy="shallow") as loader:
            it = iter(loader)
            results = []
            for _ in range(5):
                try:
                    results.append(next(it).tolist())
                except ValueError as exc:
                    results.append(exc)
            with pytest.raises(StopIteration):
                next(it)
        assert results[0] == [0, 1]
        assert results[1] is ds.errors[2]
        assert results[2] == [4, 5]
        assert results[3] is ds.errors[7]
        assert results[4] == [8, 9]
        assert results[1].__traceback__ is not None


def test_collate_fn_and_worker_init_fn_errors_reach_next():
    def bad_collate(items):
        raise TypeError("cannot collate")

    with ThreadLoader(RangeDataset(4), batch_size=2, num_workers=2, collate_fn=bad_collate) as loader:
        with pytest.raises(TypeError, match="cannot collate"):
            next(iter(loader))

    def bad_init(worker_id):
        raise RuntimeError(f"init failed in {worker_id}")

    with ThreadLoader(RangeDataset(4), batch_size=2, num_workers=1, worker_init_fn=bad_init) as loader:
        with pytest.raises(RuntimeError, match="init failed in 0"):
            next(iter(loader))


def test_timeout_raises_timeout_error_naming_the_batch(tmp_path):
    gate = FileGate(tmp_path)  # item 0 waits until the test opens it
    with ThreadLoader(WaitsForFileAt(4, 0, gate.release), batch_size=1, num_workers=2, timeout=0.1) as loader:
        try:
            with pytest.raises(TimeoutError, match=r"after 0.1 seconds waiting for batch 0 \(indices \[0\]\)") as info:
                next(iter(loader))
        finally:
            gate.open()
    assert isinstance(info.value, RuntimeError)  # what torch raises, for code that catches it


def test_ctrl_c_while_waiting_raises_at_once_and_leaves_no_thread():
    """The blocked item is only released after KeyboardInterrupt arrived: waiting for it would hang."""
    ds = GateAt(4, gated={0})
    loader = ThreadLoader(ds, batch_size=1, num_workers=2)
    it = iter(loader)
    # Earlier tests' garbage is collected now, not while the signal lands: a KeyboardInterrupt
    # raised inside a finalizer run by the collector is printed and dropped (CPython's rule for
    # finalizers), and next() would then wait for the gated item for ever.
    gc.collect()
    gc.disable()
    main = threading.get_native_id()

    def interrupt_the_waiting_next() -> None:
        wait_until(lambda: bool(ds.stuck), 30)
        wait_until_blocked(main)  # the main thread is inside next(), waiting for item 0
        os.kill(os.getpid(), signal.SIGINT)

    interrupter = threading.Thread(target=interrupt_the_waiting_next)
    interrupter.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            next(it)
        threads_after_interrupt = loader_threads()
    finally:
        gc.enable()
        ds.gate.set()
        interrupter.join()
    # Only the thread stuck in the gated __getitem__ may remain, and only until that call returns.
    assert set(threads_after_interrupt) <= {"threadloader-worker-0", "threadloader-worker-1"}
    assert len(threads_after_interrupt) <= 1
    deadline = time.monotonic() + 5
    while loader_threads() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert loader_threads() == []  # without loader.close()
    assert [b.item() for b in loader] == [0, 1, 2, 3]  # and the loader still works
    loader.close()


def test_break_then_garbage_collection_stops_the_epoch():
    ds = SlowAt(200, base=0.005)
    with ThreadLoader(ds, batch_size=1, num_workers=2) as loader:
        for i, _ in enumerate(loader):
            if i == 3:
                break
        gc.collect()
        time.sleep(0.1)
        with ds.lock:
            started = ds.started
        time.sleep(0.2)
        with ds.lock:
            assert ds.started == started  # no more loading for the abandoned epoch
        assert started <= 4 + 2 * 2
    assert loader_threads() == []


def test_multiprocessing_context_is_accepted_on_threads_with_the_reason_it_does_nothing():
    # As torch accepts it; tests/loader/test_dropin.py checks it against torch's DataLoader.
    with pytest.warns(UserWarning, match=r"no effect.*threads of this process"):
        ThreadLoader(RangeDataset(3), num_workers=2, multiprocessing_context="fork")


def test_invalid_arguments_get_torchs_errors_or_name_the_argument():
    with pytest.raises(ValueError, match="num_workers"):
        ThreadLoader(RangeDataset(3), num_workers=-1)
    with pytest.raises(ValueError, match="prefetch_factor"):
        ThreadLoader(RangeDataset(3), prefetch_factor=2)
    with pytest.raises(ValueError, match="persistent_workers"):
        ThreadLoader(RangeDataset(3), persistent_workers=True)
    with pytest.raises(ValueError, match="batch_sampler"):
        ThreadLoader(RangeDataset(3), batch_sampler=[[0]], batch_size=2)
    with pytest.raises(ValueError, match="item_concurrency"):
        ThreadLoader(RangeDataset(3), item_concurrency=0)
    with pytest.raises(ValueError, match="num_samples"):
        ThreadLoader(RangeDataset(0), shuffle=True)
    with pytest.raises(ValueError, match="timeout"):
        ThreadLoader(RangeDataset(3), timeout=-1)


class _Counting(torch.utils.data.IterableDataset):
    def __iter__(self):
        return iter(range(8))


def test_item_concurrency_is_refused_where_it_would_do_nothing():
    # An IterableDataset's items come from one iterator per worker; a graph owns its threads.
    with pytest.raises(ValueError, match=r"item_concurrency=4 does not apply to an IterableDataset.*num_workers"):
        ThreadLoader(_Counting(), batch_size=4, num_workers=2, item_concurrency=4)
    with pytest.raises(ValueError, match=r"item_concurrency=2 does not apply to a datapipes graph"):
        ThreadLoader(dp.Sampler(8), batch_size=4, item_concurrency=2)
    with ThreadLoader(_Counting(), batch_size=4, num_workers=2, item_concurrency=1) as loader:
        assert sorted(int(v) for b in loader for v in b) == sorted(
            list(range(8)) * 2
        )  # not sharded: each worker reads all


@pytest.mark.parametrize("wrap", ["Subset", "StackDataset", "random_split"])
def test_item_concurrency_reaches_the_items_of_torchs_wrappers(wrap):
    # Subset and StackDataset define __getitems__, but over a dataset without one it only calls
    # __getitem__ item after item: the loader fetches those items concurrently instead.
    inner = SlowAt(16, base=0.05)
    data = {
        "Subset": lambda: torch.utils.data.Subset(inner, list(range(15, -1, -1))),
        "StackDataset": lambda: torch.utils.data.StackDataset(inner, RangeDataset(16)),
        "random_split": lambda: torch.utils.data.random_split(inner, [12, 4], torch.Generator().manual_seed(0))[0],
    }[wrap]()
    want = list(DataLoader(data, batch_size=8))
    with ThreadLoader(data, batch_size=8, item_concurrency=4) as loader:
        assert_same(want, list(loader))
    assert inner.running.peak > 1, "the wrapper's items were fetched one at a time"


def test_a_wrapper_subclass_with_its_own_getitem_gets_torchs_batches():
    # torch's DataLoader calls StackDataset.__getitems__, which never calls the subclass's
    # __getitem__: the loader must not go item by item through it either.
    class Tagged(torch.utils.data.StackDataset):
        def __getitem__(self, i):
            return ("own",)

    data = Tagged(RangeDataset(6), RangeDataset(6))
    for workers in (0, 2):
        with ThreadLoader(data, batch_size=3, num_workers=workers, item_concurrency=3) as loader:
            assert_same(list(DataLoader(data, batch_size=3)), list(loader))


def test_a_subset_of_a_dataset_with_getitems_still_loads_whole_batches():
    inner = GetItemsDataset(10)
    data = torch.utils.data.Subset(inner, [9, 8, 7, 6, 5])
    with ThreadLoader(data, batch_size=5, item_concurrency=4) as loader:
        assert [b.tolist() for b in loader] == [[90, 80, 70, 60, 50]]
    assert inner.batches == [[9, 8, 7, 6, 5]]


def test_pin_memory_without_accelerator_warns_once_and_goes_on():
    if torch.accelerator.is_available():
        pytest.skip("an accelerator is present: pinning really happens")
    with ThreadLoader(RangeDataset(6), batch_size=2, num_workers=2, pin_memory=True) as loader:
        with pytest.warns(UserWarning, match="pin_memory"):
            first = list(loader)
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("error")
            second = list(loader)
    assert_same(first, second)
    assert_same(first, list(DataLoader(RangeDataset(6), batch_size=2)))


class InfoRecorder(Dataset):
    """Returns, per item, what both get_worker_info functions answer on the loading thread."""

    def __len__(self) -> int:
        return 16

    def __getitem__(self, i: int):
        ours = torch_threadloader.get_worker_info()
        torchs = torch.utils.data.get_worker_info()
        gen = torch.random.thread_safe_generator()
        return {
            "same": ours is torchs,
            "id": -1 if torchs is None else torchs.id,
            "num_workers": -1 if torchs is None else torchs.num_workers,
            "seed": -1 if torchs is None else torchs.seed,
            "method": "" if torchs is None else torchs.worker_method,
            "gen": gen is not None and gen is torchs.rng.torch_generator,
            "thread": threading.current_thread().name,
        }


def test_worker_info_answers_per_thread_with_torch_seeds():
    with ThreadLoader(
        InfoRecorder(), batch_size=None, num_workers=3, generator=torch.Generator().manual_seed(7)
    ) as loader:
        items = list(loader)
    base_seed = int(torch.empty((), dtype=torch.int64).random_(generator=torch.Generator().manual_seed(7)).item())
    for item in items:
        assert item["same"] and item["gen"] and item["method"] == "thread"
        assert item["num_workers"] == 3 and 0 <= item["id"] < 3
        assert item["seed"] == base_seed + item["id"]
    by_thread: dict[str, set[int]] = {}
    for item in items:
        by_thread.setdefault(item["thread"], set()).add(item["id"])
    assert all(len(ids) == 1 for ids in by_thread.values())  # one id per thread
    assert torch.utils.data.get_worker_info() is None  # the main thread is no worker
    assert torch.random.thread_safe_generator() is None


def test_worker_seeds_equal_torchs_worker_process_seeds():
    class SeedOf(Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            return torch.utils.data.get_worker_info().seed

    ref = set(DataLoader(SeedOf(), batch_size=None, num_workers=2, generator=torch.Generator().manual_seed(11)))
    with ThreadLoader(SeedOf(), batch_size=None, num_workers=2, generator=torch.Generator().manual_seed(11)) as loader:
        got = set(loader)
    assert got <= ref and len(ref) == 2


def test_worker_init_fn_runs_once_per_worker_thread_per_epoch():
    calls: list[tuple[int, str]] = []
    lock = threading.Lock()

    def init(worker_id):
        with lock:
            calls.append((worker_id, threading.current_thread().name))

    with ThreadLoader(SlowAt(24, base=0.01), batch_size=1, num_workers=3, worker_init_fn=init) as loader:
        list(loader)
        first = list(calls)
        list(loader)
    assert len({name for _, name in first}) == len(first)  # one call per thread
    assert sorted(i for i, _ in first) == list(range(len(first))) and len(first) <= 3
    assert len(calls) >= len(first) + 1  # again for the next epoch


def test_batches_from_worker_threads_are_not_in_shared_memory():
    """default_collate must not treat a thread as a worker process (shared-memory batches)."""
    with ThreadLoader(RangeDataset(8), batch_size=4, num_workers=2) as loader:
        for batch in loader:
            assert not batch.is_shared()


def test_close_stops_an_open_epoch_and_the_loader_can_run_again():
    ds = SlowAt(100, base=0.002)
    loader = ThreadLoader(ds, batch_size=1, num_workers=2)
    it = iter(loader)
    next(it)
    loader.close()  # the epoch is still open: close stops it first, without waiting on a blocked loop
    assert loader_threads() == []
    with pytest.raises(StopIteration):
        next(it)
    assert [b.item() for b in loader] == list(range(100))  # new threads for the next epoch
    loader.close()
    assert loader_threads() == []


def test_stats_count_the_epochs_batches():
    with ThreadLoader(RangeDataset(10), batch_size=3, num_workers=2) as loader:
        assert loader.stats()["graph"] == {}
        list(loader)
        stats = loader.stats()["graph"]
    assert stats["name"] == "threadloader-worker"
    assert stats["items_in"] == stats["items_out"] == 4
    assert stats["errors"] == 0 and stats["busy_s"] > 0
    assert stats["source"]["items_out"] == 4  # the sampler's batches of indices


class IntraopThreads(Dataset):
    """Each item is the number of intra-op threads torch uses on the loading thread."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> int:
        return torch.get_num_threads()


def test_worker_threads_use_one_intraop_thread_and_leave_other_threads_alone():
    if "OpenMP" not in torch.__config__.parallel_info():
        pytest.skip("torch's native thread pool is shared by all threads")
    default = torch.get_num_threads()
    with ThreadLoader(IntraopThreads(), batch_size=2, num_workers=2, item_concurrency=2) as loader:
        assert {n for batch in loader for n in batch.tolist()} == {1}  # as in torch's worker processes
    assert torch.get_num_threads() == default
    seen = []
    later = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))
    later.start()
    later.join()
    assert seen == [default]  # a thread started afterwards keeps the default


def test_worker_rng_generators_are_seeded_made_once_and_on_first_use():
    from torch_threadloader import WorkerRNG

    rng = WorkerRNG(2**64 - 5)
    assert (rng._random, rng._torch, rng._numpy) == (None, None, None)  # nothing made yet
    assert rng.random_generator.random() == random.Random(2**64 - 5).random()
    assert torch.equal(
        torch.rand(3, generator=rng.torch_generator), torch.rand(3, generator=torch.Generator().manual_seed(2**64 - 5))
    )
    assert rng.numpy_generator.random() == np.random.default_rng((2**64 - 5) % 2**63).random()
    assert (rng.random_generator, rng.torch_generator, rng.numpy_generator) == (
        rng._random,
        rng._torch,
        rng._numpy,
    )  # the same objects every time: draws continue
    seen = []
    shared = WorkerRNG(1)
    threads = [threading.Thread(target=lambda: seen.append(shared.torch_generator)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 4 and all(g is seen[0] for g in seen)  # one generator, even when raced


def test_an_epoch_that_never_draws_does_not_import_numpy_random():
    code = (
        "import sys, torch\n"
        "from torch_threadloader import ThreadLoader\n"
        "loaded = 'numpy.random' in sys.modules\n"
        "assert list(ThreadLoader(list(range(8)), batch_size=2, num_workers=2))\n"
        "print(loaded, 'numpy.random' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    if out[0] == "True":
        pytest.skip("torch or NumPy already imports numpy.random on this installation")
    assert out == ["False", "False"]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_slow_item_holds_one_of_its_batchs_item_threads_not_the_window(num_workers):
    """``item_concurrency=2``: while item 0 is stuck, the batch's other items go through the
    other item thread, each started as the one before it ends (the gate opens once all have)."""
    ds = GateAt(16, gated={0})
    seen: list[bool] = []
    opener = threading.Thread(target=ds.open_when_started, args=(range(1, 8), seen))
    loader = ThreadLoader(ds, batch_size=8, num_workers=num_workers, item_concurrency=2, worker_copy="shallow")
    with loader:
        opener.start()
        try:
            assert [b.tolist() for b in loader] == [list(range(8)), list(range(8, 16))]
        finally:
            ds.gate.set()
            opener.join()
    assert seen == [True]  # items 1-7 started while item 0 was stuck
