"""Worker semantics against torch's, and per-worker state.

torch's DataLoader with worker processes is the oracle where torch defines the behaviour:
a persistent worker is one process for the loader's life (its thread-locals stay its own), a
``worker_init_fn`` holding the dataset acts on the worker's copy (pickling maps the two
together), and ``worker_method`` is torch's spelling of where workers run.
"""

from __future__ import annotations

import copy
import functools
import warnings

import pytest
import torch
from torch.utils.data import DataLoader

from tests.fixtures.values import plain, seeded
from tests.fixtures.workers import (
    AsyncWorkerQueueDataset,
    GlobalDraws,
    HotIds,
    LockedAsyncDataset,
    OwnWords,
    ThreadLocalSeen,
    ThreadLocalStream,
    WorkerQueueDataset,
    init_fns,
    note_thread_worker,
    torch_epochs,
)
from torch_threadloader import ThreadLoader
from torch_threadloader.fetch import rebound

pytestmark = pytest.mark.usefixtures("no_child_left")


def _rows(batches):
    return [row for batch in plain(batches) for row in batch]


def _assert_on_own_thread(rows):
    bad = [row for row in rows if row[1] != row[2]]
    assert not bad, f"items whose thread-local worker id is another worker's: {bad[:5]}"


# -- persistent worker k is one thread ---------------------------------------------------------


@pytest.mark.parametrize("num_workers", [2, 3])
def test_a_persistent_worker_runs_on_its_own_thread_in_every_epoch(num_workers):
    """worker_init_fn sets a threading.local once per worker; every item of 5 epochs reads
    its own worker's value (in torch each worker is one process for the loader's life)."""
    with ThreadLoader(
        ThreadLocalSeen(24),
        batch_size=2,
        num_workers=num_workers,
        persistent_workers=True,
        worker_init_fn=note_thread_worker,
    ) as loader:
        for _ in range(5):
            _assert_on_own_thread(_rows(list(loader)))


def test_a_persistent_worker_keeps_its_thread_after_a_resume_mid_epoch():
    with ThreadLoader(
        ThreadLocalSeen(24),
        batch_size=2,
        num_workers=3,
        shuffle=True,
        generator=seeded(3),
        persistent_workers=True,
        worker_init_fn=note_thread_worker,
    ) as loader:
        for _ in range(3):
            _assert_on_own_thread(_rows(list(loader)))
        it = iter(loader)
        first = [next(it) for _ in range(4)]
        state = loader.state_dict()
        del it
        loader.load_state_dict(state)
        rest = list(loader)  # the same loader resumes: the kept threads keep their workers
        _assert_on_own_thread(_rows(first + rest))
        for _ in range(3):
            _assert_on_own_thread(_rows(list(loader)))
        assert len(rest) == 12 - 4


def test_an_iterable_persistent_worker_keeps_its_thread_after_a_resume_with_another_turn():
    """Resumed after 1 batch of 3 workers, the epoch goes on with worker 1: thread 1 still
    runs worker 1 (not thread 0, as before)."""
    kwargs = dict(batch_size=2, num_workers=3, persistent_workers=True, worker_init_fn=note_thread_worker)
    with ThreadLoader(ThreadLocalStream(30), **kwargs) as loader:
        for _ in range(3):
            _assert_on_own_thread(_rows(list(loader)))
        it = iter(loader)
        first = [next(it)]
        state = loader.state_dict()
        del it
    with ThreadLoader(ThreadLocalStream(30), **kwargs) as loader:
        loader.load_state_dict(state)
        rest = list(loader)
        _assert_on_own_thread(_rows(first + rest))
        assert sorted(r[0] for r in _rows(first + rest)) == list(range(30))
        for _ in range(3):
            _assert_on_own_thread(_rows(list(loader)))


# -- worker_init_fn holding the dataset acts on the worker's copy ------------------------------


@pytest.mark.parametrize("num_workers", [1, 2, 4])
@pytest.mark.parametrize("batch_size", [1, 3])
def test_torchs_ind_worker_queue_test(batch_size, num_workers):
    """torch's TestIndividualWorkerQueue.test_ind_worker_queue, with torch as the oracle:
    worker_init_fn=ds.worker_init_fn sets self.worker_id; batch i's items all see worker
    i % num_workers."""
    kwargs = dict(batch_size=batch_size, shuffle=False, num_workers=num_workers, timeout=5)
    ref_ds = WorkerQueueDataset(list(range(48)))
    ref = plain(torch_epochs(ref_ds, 1, worker_init_fn=ref_ds.worker_init_fn, **kwargs)[0])
    ds = WorkerQueueDataset(list(range(48)))
    with ThreadLoader(ds, worker_init_fn=ds.worker_init_fn, **kwargs) as loader:
        got = plain(list(loader))
    assert got == ref
    for i, (worker_ids, sample) in enumerate(got):  # torch's own assertions
        assert worker_ids == [i % num_workers] * batch_size
        assert sample == list(range(i * batch_size, (i + 1) * batch_size))
    assert ds.worker_id is None  # the caller's dataset is untouched


@pytest.mark.parametrize("how", list(init_fns(WorkerQueueDataset([0]))))
@pytest.mark.parametrize("persistent_workers", [False, True])
def test_every_way_of_holding_the_dataset_in_worker_init_fn_acts_on_the_copy(how, persistent_workers):
    kwargs = dict(batch_size=2, num_workers=3, persistent_workers=persistent_workers)
    ref_ds = WorkerQueueDataset(list(range(24)))
    ref = plain(torch_epochs(ref_ds, 2, worker_init_fn=init_fns(ref_ds)[how], **kwargs))
    ds = WorkerQueueDataset(list(range(24)))
    with ThreadLoader(ds, worker_init_fn=init_fns(ds)[how], **kwargs) as loader:
        got = [plain(list(loader)) for _ in range(2)]
    assert got == ref
    assert ds.worker_id is None


def test_rebound_maps_what_pickling_maps_and_leaves_the_rest():
    ds, other = WorkerQueueDataset([0]), WorkerQueueDataset([1])
    copy_ = copy.copy(ds)
    copies = {id(ds): copy_}
    assert rebound(ds.worker_init_fn, copies).__self__ is copy_
    assert rebound(other.worker_init_fn, copies).__self__ is other
    plain_fn = note_thread_worker
    assert rebound(plain_fn, copies) is plain_fn
    unchanged = functools.partial(note_thread_worker)
    assert rebound(unchanged, copies) is unchanged
    inner = functools.partial(ds.set_worker, 1)
    nested = rebound(functools.partial(print, inner, key=functools.partial(inner, 2)), copies)
    assert nested.args[0].func.__self__ is copy_ and nested.args[0].args == (1,)
    assert nested.keywords["key"].func.__self__ is copy_  # partial() flattens a partial of a partial
    # Inside a pickle round trip of (dataset, fn), the fn's dataset is the copy: the oracle.
    import pickle

    ds2, fn2 = pickle.loads(pickle.dumps((ds, functools.partial(ds.set_worker, offset=5))))
    assert fn2.func.__self__ is ds2


# -- async datasets: a copy per worker ----------------------------------------------------------


@pytest.mark.parametrize("item_concurrency", [1, 3])
@pytest.mark.parametrize("persistent_workers", [False, True])
def test_async_items_are_made_from_their_workers_copy(item_concurrency, persistent_workers):
    """Batch i's coroutines come from worker i % N's copy: the worker_init_fn that set
    self.worker_id on it reaches every item, as torch's copies (the same dataset, sync, as
    oracle)."""
    ds = AsyncWorkerQueueDataset(24)
    with ThreadLoader(
        ds,
        batch_size=3,
        num_workers=3,
        item_concurrency=item_concurrency,
        persistent_workers=persistent_workers,
        worker_init_fn=ds.worker_init_fn,
    ) as loader:
        for _ in range(2):
            batches = plain(list(loader))
            for i, (self_ids, info_ids, indices) in enumerate(batches):
                assert self_ids == [i % 3] * 3
                assert info_ids == [i % 3] * 3
                assert indices == list(range(3 * i, 3 * i + 3))
    assert ds.worker_id is None


def test_an_async_dataset_that_cannot_be_deep_copied_gets_shallow_copies_with_one_warning():
    ds = LockedAsyncDataset(12)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with ThreadLoader(ds, batch_size=2, num_workers=2, worker_copy="deep", worker_init_fn=ds.worker_init_fn) as ld:
            batches = plain(list(ld))
    relevant = [w for w in caught if "deep-copied" in str(w.message)]
    assert len(relevant) == 1, [str(w.message) for w in caught]
    assert [b[0] for b in batches] == [[i % 2] * 2 for i in range(6)]


# -- worker_copy="deep": a worker's hot objects are its own -------------------------------------


@pytest.mark.parametrize("worker_copy", ["shallow", "deep", "pickle"])
def test_worker_copy_says_whose_objects_a_worker_reads(worker_copy):
    ds = HotIds(8)
    with ThreadLoader(ds, batch_size=None, num_workers=2, worker_copy=worker_copy) as loader:
        seen = {tuple(t.tolist()) for t in loader}
    if worker_copy == "shallow":  # torch's semantics for threads: one top-level copy, shared insides
        assert seen == {ds.ids()}
    else:  # every worker its own words and vocab, none the caller's
        assert len(seen) == 2 and ds.ids() not in seen


@pytest.mark.parametrize(
    "mode", [{"num_workers": 2}, {"num_workers": 1, "worker_processes": 2}], ids=["threads", "processes"]
)
@pytest.mark.parametrize("worker_copy", ["deep", "pickle"])
def test_a_pickle_copy_makes_even_the_strs_the_workers_own(worker_copy, mode):
    """``worker_copy="pickle"``: the worker's copy is unpickled on its thread, so even a
    ``str`` is its own (a deep copy keeps it): what a free-threaded build needs for uncontended
    reference counts. In a worker process too (there the copy the child unpickled is the first)."""
    with ThreadLoader(OwnWords(8), batch_size=None, worker_copy=worker_copy, **mode) as loader:
        got = [t.tolist() for t in loader]
    assert [i for i, _ in got] == list(range(8))
    assert {own for _, own in got} == {int(worker_copy == "pickle")}


def test_a_dataset_that_cannot_be_pickled_gets_shallow_copies_with_one_warning():
    ds = OwnWords(6, lock=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with ThreadLoader(ds, batch_size=None, num_workers=2, worker_copy="pickle") as loader:
            got = [t.tolist() for t in loader]
    relevant = [w for w in caught if "cannot be pickled" in str(w.message)]
    assert len(relevant) == 1, [str(w.message) for w in caught]
    assert got == [[i, 0] for i in range(6)]  # the shallow copies share the words


def test_worker_copy_is_checked():
    with pytest.raises(ValueError, match="worker_copy"):
        ThreadLoader(HotIds(4), worker_copy="full")


def test_deep_copies_rebind_worker_init_fn_to_the_workers_copy():
    ds = WorkerQueueDataset(list(range(12)))
    with ThreadLoader(ds, batch_size=2, num_workers=3, worker_copy="deep", worker_init_fn=ds.worker_init_fn) as ld:
        assert [b[0] for b in plain(list(ld))] == [[i % 3] * 2 for i in range(6)]


# -- worker_method: torch's spelling -------------------------------------------------------------


def test_worker_method_thread_is_worker_threads():
    ds = ThreadLocalSeen(8)
    ref = plain(list(DataLoader(ds, batch_size=2)))
    with ThreadLoader(ds, batch_size=2, num_workers=2, worker_method="thread") as loader:
        assert loader.worker_processes == 0 and loader.num_workers == 2
        assert [[row[:2] for row in b] for b in plain(list(loader))] == [
            [[row[0], i % 2] for row in b] for i, b in enumerate(ref)
        ]


def test_worker_method_multiprocessing_is_worker_processes_with_torchs_batches():
    kwargs = dict(batch_size=2, num_workers=3, shuffle=True)
    ds = WorkerQueueDataset(list(range(18)))
    ref = plain(torch_epochs(ds, 1, generator=seeded(5), worker_init_fn=ds.worker_init_fn, **kwargs)[0])
    with ThreadLoader(
        ds, generator=seeded(5), worker_init_fn=ds.worker_init_fn, worker_method="multiprocessing", **kwargs
    ) as loader:
        assert (loader.worker_processes, loader.num_workers) == (3, 1)
        assert plain(list(loader)) == ref


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"worker_method": "process"}, "worker_method must be one of"),
        ({"worker_method": 1}, "worker_method must be one of"),
        ({"worker_method": "thread", "worker_processes": 2}, "worker_method='thread'"),
        ({"worker_method": "multiprocessing"}, "num_workers must be a positive int"),
    ],
)
def test_a_bad_worker_method_is_a_value_error_naming_it(kwargs, words):
    with pytest.raises(ValueError, match=words):
        ThreadLoader(ThreadLocalSeen(4), **kwargs)


# -- per_sample_rng: the same draws for any num_workers and item_concurrency --------------------


def _draws(**kwargs):
    with ThreadLoader(GlobalDraws(24), batch_size=4, generator=seeded(11), per_sample_rng=True, **kwargs) as loader:
        return [plain(list(loader)) for _ in range(3)]


def test_per_sample_rng_gives_the_same_batches_for_any_workers_and_item_concurrency():
    ref = _draws()
    for kwargs in (
        {"num_workers": 1},
        {"num_workers": 3},
        {"num_workers": 2, "item_concurrency": 4},
        {"num_workers": 2, "in_order": False},
    ):
        got = _draws(**kwargs)
        if kwargs.get("in_order") is False:
            got = [sorted(epoch) for epoch in got]
            assert got == [sorted(epoch) for epoch in ref], kwargs
        else:
            assert got == ref, kwargs
    # Persistent workers draw the base seed once (torch's rule), so the epochs after the first
    # draw from another base seed than without: the same for any workers among themselves.
    kept = _draws(num_workers=1, persistent_workers=True)
    assert kept[0] == ref[0]
    assert _draws(num_workers=3, persistent_workers=True, item_concurrency=2) == kept
    rows = [row for epoch in ref for batch in epoch for row in batch]
    assert len({tuple(r[1:]) for r in rows}) == len(rows)  # every item of every epoch draws anew


def test_per_sample_rng_draws_depend_on_the_loaders_generator():
    with ThreadLoader(GlobalDraws(8), batch_size=4, generator=seeded(12), per_sample_rng=True) as loader:
        other = plain(list(loader))
    assert other != _draws()[0]


def test_per_sample_rng_leaves_the_global_generator_alone():
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    with ThreadLoader(GlobalDraws(8), batch_size=4, num_workers=2, generator=seeded(1), per_sample_rng=True) as loader:
        list(loader)
    assert torch.equal(torch.rand(3), expected)


def test_per_sample_rng_resumes_with_the_same_draws():
    def loader():
        return ThreadLoader(
            GlobalDraws(24), batch_size=4, num_workers=2, generator=seeded(11), per_sample_rng=True, shuffle=True
        )

    with loader() as ld:
        whole = [plain(list(ld)) for _ in range(3)]
    with loader() as ld:
        first = plain(list(ld))
        it = iter(ld)
        part = [plain(next(it)) for _ in range(2)]
        state = ld.state_dict()
        del it
    with loader() as ld:
        ld.load_state_dict(state)
        rest = plain(list(ld))
        after = plain(list(ld))  # the epoch after the resumed one draws for the next epoch
    assert [first, part + rest, after] == whole


@pytest.mark.parametrize(
    "dataset",
    [ThreadLocalStream(4), AsyncWorkerQueueDataset(4)],
    ids=["iterable", "async"],
)
def test_per_sample_rng_is_refused_where_it_cannot_apply(dataset):
    with pytest.raises(ValueError, match="per_sample_rng"):
        ThreadLoader(dataset, per_sample_rng=True)


def test_a_torchvision_v2_pipeline_without_a_seed_draws_the_loaders_per_sample_draws():
    """Augmented(seed=None) in ThreadLoader(per_sample_rng=True): the v2 transform's draws
    (torch's random functions, no generator=) are the same for any workers and item
    concurrency, and differ between epochs."""
    pytest.importorskip("torchvision")
    from torchvision.transforms import v2

    from torch_threadloader.images import Augmented

    images = [torch.arange(3 * 20 * 20, dtype=torch.uint8).reshape(3, 20, 20) + i for i in range(12)]
    transform = v2.Compose([v2.RandomResizedCrop(8, antialias=True), v2.RandomHorizontalFlip(), v2.ColorJitter(0.5)])

    def run(**kwargs):
        ds = Augmented(images, transform)
        with ThreadLoader(ds, batch_size=3, generator=seeded(4), per_sample_rng=True, **kwargs) as loader:
            return [torch.cat(list(loader)) for _ in range(2)]

    ref = run()
    assert not torch.equal(ref[0], ref[1])
    for kwargs in ({"num_workers": 1}, {"num_workers": 3}, {"num_workers": 2, "item_concurrency": 3}):
        got = run(**kwargs)
        assert all(torch.equal(a, b) for a, b in zip(got, ref, strict=True)), kwargs


def test_a_copy_of_a_loader_with_per_sample_rng_draws_as_the_original_would():
    import pickle

    with ThreadLoader(GlobalDraws(8), batch_size=4, generator=seeded(2), per_sample_rng=True) as loader:
        list(loader)
        clone = pickle.loads(pickle.dumps(loader))
        with clone:
            assert plain(list(clone)) == plain(list(loader))
