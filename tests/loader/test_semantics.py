"""Worker semantics: ThreadLoader's workers behave as torch's worker processes.

The oracle is ``torch.utils.data.DataLoader`` with real worker processes (fork on Linux), over
tiny datasets and at most four workers. Where torch's behaviour and a reading of the issue
could differ, the test follows torch and says so.

Where the behaviour is defined for process mode, a test runs in both modes (``mode``): ``W``
worker threads, or worker processes running ``W`` threads in all (``workers_in``), against
torch's ``DataLoader(num_workers=W)``. In process only: ``num_workers=0`` (inline), a dataset
that cannot be pickled, a closure as ``worker_init_fn``.
"""

from __future__ import annotations

import copy
import dataclasses
import gc
import pickle
import threading
import warnings

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader

import datapipes as dp
from tests.fixtures.datasets import RangeDataset, WaitsForFileAt
from tests.fixtures.processes import workers_in
from tests.fixtures.threads import loader_threads
from tests.fixtures.values import next_past_timeouts, plain, seeded
from tests.fixtures.workers import (
    AsyncWorkerSeen,
    InitCounter,
    InitSeen,
    JitteredDraws,
    OverlongStream,
    SelfSeen,
    SlowWorker0Stream,
    StartEndStream,
    Uncopyable,
    WorkerRngDraws,
    WorkerSeen,
    keep_items,
    mark_init,
    split_start_end,
    thread_epochs,
    torch_epochs,
)
from torch_threadloader import ThreadLoader

pytestmark = pytest.mark.usefixtures("no_child_left")

SMALL = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MODES = ["threads", "processes"]


# -- worker_init_fn and the base seed, per epoch or once --------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("persistent_workers", [False, True])
@pytest.mark.parametrize("num_workers", [1, 2])
def test_worker_init_fn_runs_as_often_as_torchs(num_workers, persistent_workers, mode):
    """persistent_workers=False: once per worker per epoch (3 epochs: 3*N calls);
    True: once per worker for the loader's life (N calls)."""
    kwargs = dict(batch_size=2, persistent_workers=persistent_workers)
    ref_count = InitCounter()
    torch_epochs(RangeDataset(16), 3, worker_init_fn=ref_count, num_workers=num_workers, **kwargs)
    got_count = InitCounter()
    thread_epochs(RangeDataset(16), 3, worker_init_fn=got_count, **workers_in(mode, num_workers), **kwargs)
    expected = num_workers if persistent_workers else 3 * num_workers
    assert ref_count.value.value == expected  # the oracle itself
    assert got_count.value.value == expected


def _seeds_by_epoch(epochs):
    return [
        sorted(
            {
                (item_id, seed)
                for batch in epoch
                for item_id, seed in zip(batch["id"].tolist(), batch["seed"].tolist(), strict=True)
            }
        )
        for epoch in epochs
    ]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("persistent_workers", [False, True])
@pytest.mark.parametrize("num_workers", [1, 2])
def test_worker_seeds_per_epoch_equal_torchs(num_workers, persistent_workers, mode):
    """Each worker's seed is base_seed + id, the base seed drawn from the loader's generator
    at every epoch (persistent_workers=False) or once (True), exactly as torch draws it."""
    kwargs = dict(batch_size=2, persistent_workers=persistent_workers)
    ref = _seeds_by_epoch(torch_epochs(WorkerSeen(12), 3, generator=seeded(21), num_workers=num_workers, **kwargs))
    got = _seeds_by_epoch(
        thread_epochs(WorkerSeen(12), 3, generator=seeded(21), **workers_in(mode, num_workers), **kwargs)
    )
    assert got == ref
    base_seeds = {seed - wid for epoch in got for wid, seed in epoch}
    if persistent_workers:
        assert len(base_seeds) == 1  # drawn once for the loader's life
    else:
        assert len(base_seeds) == 3  # drawn per epoch


@SMALL
@given(
    num_workers=st.integers(1, 2),
    prefetch_factor=st.integers(1, 3),
    persistent_workers=st.booleans(),
    seed=st.integers(0, 2**31),
)
def test_seeded_shuffle_gives_torchs_batches_in_every_epoch(num_workers, prefetch_factor, persistent_workers, seed):
    """The loader's generator feeds both the base seed and the sampler; with persistent
    workers torch draws the base seed only at the first epoch, so later permutations differ
    from the non-persistent ones. ThreadLoader must draw exactly as torch does."""
    kwargs = dict(
        batch_size=3,
        shuffle=True,
        num_workers=num_workers,
        prefetch_factor=prefetch_factor,
        persistent_workers=persistent_workers,
    )
    ref = plain(torch_epochs(RangeDataset(11), 3, generator=seeded(seed), **kwargs))
    got = plain(thread_epochs(RangeDataset(11), 3, generator=seeded(seed), **kwargs))
    assert got == ref


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    num_workers=st.sampled_from([1, 2, 4]),
    prefetch_factor=st.integers(1, 3),
    persistent_workers=st.booleans(),
    seed=st.integers(0, 2**31),
)
def test_seeded_shuffle_gives_torchs_batches_in_every_epoch_in_processes(
    num_workers, prefetch_factor, persistent_workers, seed
):
    """The same, the loading done by worker processes (the draws stay in the loader's process)."""
    kwargs = dict(batch_size=3, shuffle=True, prefetch_factor=prefetch_factor, persistent_workers=persistent_workers)
    ref = plain(torch_epochs(RangeDataset(11), 3, generator=seeded(seed), num_workers=num_workers, **kwargs))
    got = plain(
        thread_epochs(RangeDataset(11), 3, generator=seeded(seed), **workers_in("processes", num_workers), **kwargs)
    )
    assert got == ref


# -- the sampler's global-RNG draws happen when torch makes them -------------------------------


def _global_rng_sequence(cls, num_workers, prefetch_factor=None, mode="threads"):
    """torch's global generator seeded, the caller draws from it between iter() and next()."""
    kwargs = dict(batch_size=3, shuffle=True, num_workers=num_workers)
    if num_workers:
        kwargs["prefetch_factor"] = prefetch_factor or 2
    if cls is ThreadLoader and num_workers:
        kwargs.update(workers_in(mode, num_workers))
    loader = cls(RangeDataset(12), **kwargs)
    torch.manual_seed(0)
    it = iter(loader)
    torch.rand(1)  # the caller uses the global RNG after iter()
    batches = plain(list(it))
    after = torch.rand(1).item()  # and what the loader left of the global generator
    if isinstance(loader, ThreadLoader):
        loader.close()
    return batches, after


@pytest.mark.parametrize(
    "mode,num_workers,prefetch_factor",
    [("threads", 0, None)] + [(mode, *case) for mode in MODES for case in [(1, 1), (2, 2), (2, 3)]],
)
def test_global_rng_draws_happen_when_torch_makes_them(mode, num_workers, prefetch_factor):
    """torch draws the base seed at iter(); without workers the RandomSampler's seed is drawn
    lazily at the first next(); with workers iter() already primes prefetch_factor*num_workers
    index batches, so the sampler's seed is drawn inside iter()."""
    ref = _global_rng_sequence(DataLoader, num_workers, prefetch_factor)
    for _ in range(5):  # a loader that draws on a worker thread, racing the caller, fails some runs
        got = _global_rng_sequence(ThreadLoader, num_workers, prefetch_factor, mode)
        assert got == ref


class _DrawRecorder(torch.utils.data.Sampler):
    """A random order drawn from the global generator at the first next() of its iterator;
    ``drawn`` is set once that draw happened."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.drawn = threading.Event()

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        order = torch.randperm(self.n).tolist()
        self.drawn.set()
        yield from order


def _drawn_at_iter(cls, num_workers, mode="threads"):
    sampler = _DrawRecorder(12)
    workers = workers_in(mode, num_workers) if cls is ThreadLoader and num_workers else {"num_workers": num_workers}
    loader = cls(RangeDataset(12), batch_size=3, sampler=sampler, **workers)
    it = iter(loader)
    drawn_at_iter = sampler.drawn.is_set()  # no waiting: what iter() itself did
    next(it)
    drawn_at_next = sampler.drawn.is_set()
    del it
    if isinstance(loader, ThreadLoader):
        loader.close()
    return drawn_at_iter, drawn_at_next


@pytest.mark.parametrize("mode,num_workers", [("threads", 0)] + [(mode, n) for mode in MODES for n in (1, 2)])
def test_sampler_is_first_advanced_inside_iter_exactly_when_torch_does(mode, num_workers):
    """torch with workers primes its index queue inside iter() (the sampler's draw is done
    when iter() returns); without workers the first next() draws."""
    ref = _drawn_at_iter(DataLoader, num_workers)
    assert ref == ((num_workers > 0), True)  # the oracle
    for _ in range(3):
        assert _drawn_at_iter(ThreadLoader, num_workers, mode) == ref


# -- batch i is loaded by worker i % num_workers ----------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("num_workers", [2, 3])
def test_batch_i_is_loaded_by_worker_i_mod_num_workers(num_workers, mode):
    """Random per-item delays: the assignment must not depend on which thread is free."""
    kwargs = dict(batch_size=2, in_order=True)
    ref = [
        [b["id"].tolist() for b in epoch]
        for epoch in torch_epochs(WorkerSeen(18), 2, num_workers=num_workers, **kwargs)
    ]
    got = [
        [b["id"].tolist() for b in epoch]
        for epoch in thread_epochs(WorkerSeen(18, jitter_s=0.01), 3, **workers_in(mode, num_workers), **kwargs)
    ]
    assert ref[0] == [[i % num_workers] * 2 for i in range(9)]  # the oracle: round robin
    for epoch in got:
        assert epoch == ref[0]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("num_workers", [1, 2])
def test_worker_draws_from_thread_safe_generator_equal_torchs_and_ignore_timing(num_workers, mode):
    """thread_safe_generator() is the worker's own generator, seeded with the worker's seed,
    as torch seeds a worker process's global generator: same draws as torch, whatever the
    item durations (which with two workers would change which worker loads what, unless
    batch i always goes to worker i % num_workers)."""
    ref = plain(
        torch_epochs(JitteredDraws(12, jitter_s=0.0), 2, generator=seeded(5), batch_size=2, num_workers=num_workers)
    )
    kwargs = dict(batch_size=2, **workers_in(mode, num_workers))
    got1 = plain(thread_epochs(JitteredDraws(12), 2, generator=seeded(5), **kwargs))
    got2 = plain(thread_epochs(JitteredDraws(12), 2, generator=seeded(5), **kwargs))
    assert got1 == ref
    assert got2 == ref


@pytest.mark.parametrize("mode", MODES)
def test_worker_info_rng_draws_are_reproducible_under_random_timing(mode):
    from torch.utils.data._utils.worker import WorkerInfo  # not re-exported by torch.utils.data

    if "rng" not in {f.name for f in dataclasses.fields(WorkerInfo)}:
        pytest.skip("this torch's WorkerInfo has no rng")
    runs = [
        plain(thread_epochs(WorkerRngDraws(16), 2, batch_size=2, generator=seeded(9), **workers_in(mode, 2)))
        for _ in range(3)
    ]
    assert runs[0] == runs[1] == runs[2]


# -- each worker sees its own shallow copy of the dataset --------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("num_workers", [1, 2, 3])
def test_torchs_documented_worker_init_fn_example_shards_worker_copies(num_workers, mode):
    """torch's docs example: worker_init_fn rewrites start/end of its worker's dataset copy."""
    ref_ds = StartEndStream(3, 7)
    ref = plain(torch_epochs(ref_ds, 1, num_workers=num_workers, worker_init_fn=split_start_end)[0])
    ds = StartEndStream(3, 7)
    with ThreadLoader(ds, worker_init_fn=split_start_end, **workers_in(mode, num_workers)) as loader:
        got = plain(list(loader))
        again = plain(list(loader))  # a second epoch starts again from the caller's object
    assert got == ref  # same items, same order
    assert again == ref
    assert (ds.start, ds.end) == (3, 7)  # the caller's dataset is untouched


@pytest.mark.parametrize("mode", MODES)
def test_map_style_workers_call_their_own_copy(mode):
    with ThreadLoader(SelfSeen(8), batch_size=None, **workers_in(mode, 2)) as loader:
        items = list(loader)
    assert [i for i, *_ in items] == list(range(8))
    for _, _, info_dataset_is_self, self_is_original in items:
        assert info_dataset_is_self  # get_worker_info().dataset is the object __getitem__ runs on
        assert not self_is_original  # and that is a copy, not the caller's object


def test_uncopyable_dataset_is_shared_with_exactly_one_warning():
    ref = sorted(plain(torch_epochs(Uncopyable(10), 1, num_workers=2)[0]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with ThreadLoader(Uncopyable(10), num_workers=2) as loader:
            got = plain(list(loader))
    relevant = [w for w in caught if "copy" in str(w.message).lower() or "copied" in str(w.message).lower()]
    assert len(relevant) == 1, [str(w.message) for w in caught]
    assert sorted(got) == ref == [[i] for i in range(10)]


# -- worker info reaches every item ------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_worker_info_generator_and_init_reach_every_item_with_item_concurrency(mode):
    with ThreadLoader(
        InitSeen(32),
        batch_size=8,
        item_concurrency=4,
        worker_init_fn=mark_init,
        collate_fn=keep_items,
        **workers_in(mode, 2),
    ) as loader:
        batches = list(loader)
    for batch_index, batch in enumerate(batches):
        for i, worker_id, has_generator, init_ran in batch:
            assert worker_id == batch_index % 2, (i, worker_id)  # the worker that loads the batch
            assert has_generator, i
            assert init_ran, i


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("item_concurrency", [1, 4])
def test_async_items_see_the_worker_info_of_their_batch(item_concurrency, mode):
    """Spec: get_worker_info() inside an async __getitem__ is the info of the worker that
    loads that batch (batch i: worker i % num_workers)."""
    with ThreadLoader(
        AsyncWorkerSeen(24),
        batch_size=4,
        item_concurrency=item_concurrency,
        collate_fn=keep_items,
        **workers_in(mode, 2),
    ) as loader:
        batches = list(loader)
    assert [[i for i, _ in b] for b in batches] == [list(range(k, k + 4)) for k in range(0, 24, 4)]
    assert [[wid for _, wid in b] for b in batches] == [[k % 2] * 4 for k in range(6)]


# -- in_order=False applies to IterableDatasets -----------------------------------------------


def _items(batches):
    return [x for b in batches for x in b.tolist()]


@pytest.mark.parametrize("mode", MODES)
def test_in_order_false_iterable_yields_what_is_ready_first(mode, tmp_path):
    ref = _items(torch_epochs(SlowWorker0Stream(gate=str(tmp_path / "torch")), 1, num_workers=2, in_order=False)[0])
    ours = SlowWorker0Stream(gate=str(tmp_path / "ours"))
    got = _items(thread_epochs(ours, 1, in_order=False, **workers_in(mode, 2))[0])
    round_robin = [0, 100, 1, 101, 2, 102]
    assert sorted(ref) == sorted(got) == sorted(round_robin)
    assert ref != round_robin  # the oracle: torch yields the fast worker's batches first
    assert got != round_robin
    # The slow worker starts once the fast one has ended, so the fast one's first batch comes
    # first. Not more: with worker processes, the fast child's later batches may wait for
    # credits while the slow one's are taken (the order is what is ready first).
    assert ref[0] == 100 and got[0] == 100


@pytest.mark.parametrize("mode", MODES)
def test_in_order_true_iterable_stays_round_robin(mode):
    ref = _items(torch_epochs(SlowWorker0Stream(slow_s=0.05), 1, num_workers=2)[0])
    got = _items(thread_epochs(SlowWorker0Stream(slow_s=0.05), 1, **workers_in(mode, 2))[0])
    assert got == ref == [0, 100, 1, 101, 2, 102]


# -- IterableDataset length warning ------------------------------------------------------------


@pytest.mark.parametrize("mode,num_workers", [("threads", 0), ("threads", 2), ("processes", 2)])
def test_iterable_longer_than_its_len_warns_as_torch_does(mode, num_workers):
    ref_loader = DataLoader(OverlongStream(), num_workers=num_workers)
    len(ref_loader)  # torch only checks when len(loader) was asked
    with pytest.warns(UserWarning, match=r"Length of IterableDataset .* was reported to be 2"):
        ref = plain(list(ref_loader))
    workers = workers_in(mode, num_workers) if num_workers else {"num_workers": 0}
    with ThreadLoader(OverlongStream(), **workers) as loader:
        len(loader)
        with pytest.warns(UserWarning, match=r"Length of IterableDataset .* was reported to be 2"):
            got = plain(list(loader))
    assert got == ref


# -- timeout -----------------------------------------------------------------------------------


def test_timeout_with_num_workers_0_is_accepted_as_torch_accepts_it():
    """torch 2.14: DataLoader(num_workers=0, timeout=5) constructs; iter() raises
    AssertionError('_SingleProcessDataLoaderIter requires timeout == 0'). ThreadLoader must
    construct too (Lightning and other re-instantiating code pass timeout through), and
    iter() follows torch: an AssertionError that names the timeout."""
    DataLoader(RangeDataset(4), num_workers=0, timeout=5)  # the oracle constructs
    with pytest.raises(AssertionError, match="timeout"):
        iter(DataLoader(RangeDataset(4), num_workers=0, timeout=5))
    loader = ThreadLoader(RangeDataset(4), num_workers=0, timeout=5)
    try:
        with pytest.raises(AssertionError, match="timeout"):
            iter(loader)
    finally:
        loader.close()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("pin_memory", [False, True])
def test_timeout_names_the_batch_and_iteration_goes_on_in_order(pin_memory, mode, tmp_path):
    """Batch 1 (indices [2, 3]) waits until the test releases it, against timeout=0.5: next()
    raises an error that is both torch's RuntimeError and a TimeoutError, says "batch 1" and
    lists [2, 3]. As in torch (whose _rcvd_idx stays put), the batch keeps its place: the next
    next() waits for it again (timing out again until it arrives), then the rest follow in
    order. torch's own message is only "DataLoader timed out after 0.5 seconds"."""
    release = tmp_path / "release"
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*pin_memory.*")
        with ThreadLoader(
            WaitsForFileAt(12, at=2, path=str(release)),
            batch_size=2,
            timeout=0.5,
            pin_memory=pin_memory,
            **workers_in(mode, 2),
        ) as loader:
            it = iter(loader)
            # The timeout is for batch 1; batch 0 may take longer while worker processes start.
            assert next_past_timeouts(it, 0).tolist() == [0, 1]
            with pytest.raises(TimeoutError) as info:
                next(it)
            release.touch()
            while True:  # batch 1 arrives once released; a wait may time out once more
                try:
                    first = next(it).tolist()
                    break
                except TimeoutError as again:
                    assert "batch 1" in str(again)
            rest = [first] + [b.tolist() for b in it]
    assert isinstance(info.value, RuntimeError)
    message = str(info.value)
    assert "batch 1" in message, message
    assert "[2, 3]" in message, message
    assert rest == [[2, 3], [4, 5], [6, 7], [8, 9], [10, 11]]


# -- pickling and deep copies ------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("how", ["pickle", "deepcopy"])
@pytest.mark.parametrize("used_first", [False, True])
def test_a_loader_pickles_and_deep_copies(how, used_first, mode):
    """A copy iterates the same batches as the original would (same generator state), and
    owns its threads (and worker processes): closing it leaves the original's, and the
    original still runs."""
    original = ThreadLoader(RangeDataset(10), batch_size=3, shuffle=True, generator=seeded(3), **workers_in(mode, 2))
    try:
        if used_first:
            list(original)  # live threads now (kept between epochs, or at least made once)
        clone = pickle.loads(pickle.dumps(original)) if how == "pickle" else copy.deepcopy(original)
        try:
            assert isinstance(clone, ThreadLoader)
            from_clone = plain(list(clone))
        finally:
            clone.close()
        from_original = plain(list(original))
        assert from_clone == from_original
    finally:
        original.close()
    assert loader_threads() == []


# -- a datapipes graph inside torch's own DataLoader -------------------------------------------


def _double(i: int) -> int:
    return i * 2


def test_a_datapipes_graph_in_torchs_dataloader_with_workers_is_not_duplicated():
    """Either each item comes out exactly once overall (the graph shards by worker) or
    iteration raises a clear error naming num_workers; never once per worker, silently."""
    graph = dp.Sampler(10).map(_double)
    loader = DataLoader(graph, batch_size=None, num_workers=2)
    try:
        items = [int(x) for x in loader]
    except Exception as exc:  # any clear error is fine
        assert "num_workers" in str(exc), str(exc)
    else:
        assert sorted(items) == [i * 2 for i in range(10)]
    finally:
        del loader
        gc.collect()


class EagerGlobalSampler(torch.utils.data.Sampler[int]):
    """Draws its whole order from the global RNG in ``__iter__`` itself, not lazily."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self):
        return iter(torch.randperm(self.n).tolist())

    def __len__(self) -> int:
        return self.n


@pytest.mark.parametrize(
    ("mode", "num_workers", "persistent"),
    [("threads", 0, False)] + [(mode, 2, persistent) for mode in MODES for persistent in (False, True)],
)
def test_an_eager_sampler_draws_before_the_base_seed_as_in_torch(mode, num_workers, persistent):
    """torch calls iter(sampler) at iter(loader), before it draws the base seed from the same
    global RNG (with workers, it calls it again after and uses that one): with batch_size=None
    the sampler is iterated directly, so the order of these draws shows, over two epochs."""

    def epochs(cls):
        torch.manual_seed(7)
        workers = workers_in(mode, num_workers) if cls is ThreadLoader and num_workers else {"num_workers": num_workers}
        loader = cls(
            RangeDataset(12),
            batch_size=None,
            sampler=EagerGlobalSampler(12),
            persistent_workers=persistent,
            **workers,
        )
        try:
            return [[int(x) for x in loader] for _ in range(2)]
        finally:
            close = getattr(loader, "close", None)
            if close is not None:
                close()
            del loader
            gc.collect()

    assert epochs(ThreadLoader) == epochs(DataLoader)


class GlobalDrawSampler(torch.utils.data.Sampler[int]):
    """A user's sampler that draws each index from torch's global generator as it yields."""

    def __init__(self, n: int, count: int) -> None:
        self.n, self.count = n, count

    def __iter__(self):  # type: ignore[no-untyped-def]
        for _ in range(self.count):
            yield int(torch.randint(self.n, ()))

    def __len__(self) -> int:
        return self.count


def _run_with_step_draws(loader_cls: type, **kwargs: object) -> tuple[list[list[int]], list[float]]:
    """Batches and the training step's own global draws (many per step, to widen any race)."""
    torch.manual_seed(7)
    loader = loader_cls(list(range(50)), batch_size=3, sampler=GlobalDrawSampler(50, 60), **kwargs)
    batches, draws = [], []
    for batch in loader:
        batches.append(batch.tolist())
        draws.append(float(sum(torch.rand(200).sum() for _ in range(20))))
    if isinstance(loader, ThreadLoader):
        loader.close()
    return batches, draws


@pytest.mark.parametrize("num_workers", [1, 2])
def test_a_sampler_drawing_from_the_global_generator_is_pulled_where_torch_pulls_it(num_workers: int) -> None:
    # torch pulls the sampler in next(), between the step's own draws; pulled on a worker
    # thread, its draws interleave with the step's at random and both sequences change.
    expected = _run_with_step_draws(DataLoader, num_workers=num_workers)
    for _ in range(3):
        assert _run_with_step_draws(ThreadLoader, num_workers=num_workers) == expected


def test_torch_samplers_may_be_pulled_on_a_worker_thread_and_user_samplers_may_not() -> None:
    from torch_threadloader.batching import pulls_anywhere

    data = list(range(10))
    assert pulls_anywhere(ThreadLoader(data, batch_size=2, shuffle=True))
    assert pulls_anywhere(ThreadLoader(data, batch_size=2, shuffle=True, generator=torch.Generator()))
    assert not pulls_anywhere(ThreadLoader(data, batch_size=2, sampler=GlobalDrawSampler(10, 10)))
    replacing = torch.utils.data.RandomSampler(data, replacement=True, generator=torch.Generator())
    assert not pulls_anywhere(ThreadLoader(data, batch_size=2, sampler=replacing))
    custom_batches = [[0, 1], [2, 3]]
    assert not pulls_anywhere(ThreadLoader(data, batch_sampler=custom_batches))


# -- StopIteration from a dataset ---------------------------------------------------------------


class StopIterationAt(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 12

    def __getitem__(self, i: int) -> int:
        if i == 3:
            raise StopIteration
        return i


@pytest.mark.parametrize("num_workers", [0, 2])
def test_stop_iteration_from_a_map_style_dataset_ends_the_epoch_as_in_torch(num_workers):
    """torch re-raises it in next(), which ends the for loop at that batch; it never drops
    the batch and goes on."""
    reference = iter(DataLoader(StopIterationAt(), num_workers=num_workers))
    expected = [b.tolist() for b in reference]
    del reference  # torch's iterator stops its worker processes when collected
    gc.collect()
    with ThreadLoader(StopIterationAt(), num_workers=num_workers) as loader:
        got = [b.tolist() for b in loader]
    assert got == expected == [[0], [1], [2]]
