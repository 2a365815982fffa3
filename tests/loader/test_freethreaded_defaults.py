"""``worker_copy``'s default: ``"pickle"`` where threads run Python in parallel (a free-threaded
build with the GIL off), ``"shallow"`` everywhere else; ``loader.worker_copy`` reads the one
chosen. Every ``worker_copy`` yields torch's batches (the oracle: its worker processes each
unpickle their own copy), threads and worker processes, map-style, iterable and async."""

from __future__ import annotations

import sys
import sysconfig
import warnings

import pytest
import torch

import torch_threadloader.worker_info as worker_info
from tests.fixtures.datasets import AsyncItems, Items, Shards
from tests.fixtures.processes import workers_in
from tests.fixtures.values import assert_same, plain
from tests.fixtures.workers import GlobalDraws, HotIds, OwnWords, Uncopyable, torch_epochs
from torch_threadloader import ThreadLoader
from torch_threadloader.worker_info import check_worker_copy, default_worker_copy, gil_disabled

pytestmark = pytest.mark.usefixtures("no_child_left")

MODES = ["threads", "processes"]
COPIES = [None, "shallow", "deep", "pickle"]


def _parallel_here() -> bool:
    """Whether this interpreter runs threads in parallel, read without the code under test."""
    return bool(sysconfig.get_config_var("Py_GIL_DISABLED")) and not sys._is_gil_enabled()  # type: ignore[attr-defined]


@pytest.fixture(params=[True, False], ids=["gil-off", "gil-on"])
def parallel(request, monkeypatch):
    """The resolver's answer to "do threads run in parallel here?", either way, on any build."""
    monkeypatch.setattr(worker_info, "gil_disabled", lambda: request.param)
    return request.param


# -- the resolver ------------------------------------------------------------------------------


def test_the_default_is_pickle_where_threads_run_in_parallel_and_shallow_where_not():
    assert default_worker_copy(True) == "pickle"
    assert default_worker_copy(False) == "shallow"
    assert default_worker_copy() == ("pickle" if _parallel_here() else "shallow")


@pytest.mark.parametrize(
    ("build", "gil_on", "expected"),
    [(None, True, False), (0, True, False), (1, True, False), (1, False, True)],
    ids=["gil-build", "gil-build-0", "free-threaded-gil-on", "free-threaded-gil-off"],
)
def test_threads_run_in_parallel_on_a_free_threaded_build_with_the_gil_off_only(monkeypatch, build, gil_on, expected):
    real = sysconfig.get_config_var
    monkeypatch.setattr(sysconfig, "get_config_var", lambda name: build if name == "Py_GIL_DISABLED" else real(name))
    monkeypatch.setattr(sys, "_is_gil_enabled", lambda: gil_on, raising=False)
    assert gil_disabled() is expected


def test_a_free_threaded_build_without_the_gil_check_counts_as_gil_on(monkeypatch):
    monkeypatch.setattr(sysconfig, "get_config_var", lambda name: 1)
    monkeypatch.delattr(sys, "_is_gil_enabled", raising=False)
    assert gil_disabled() is False


def test_on_this_interpreter_the_loader_resolves_the_default_and_its_workers_get_it():
    expected = "pickle" if _parallel_here() else "shallow"
    assert gil_disabled() is _parallel_here()
    with ThreadLoader(OwnWords(6), batch_size=None, num_workers=2) as loader:
        assert loader.worker_copy == expected
        got = [t.tolist() for t in loader]
    assert got == [[i, int(expected == "pickle")] for i in range(6)]


@pytest.mark.parametrize("mode", MODES)
def test_the_default_resolves_by_the_build_and_the_workers_copy_as_it_says(parallel, mode):
    """Where threads run in parallel each worker's ``str`` objects are its own (unpickled on its
    thread, in a worker process too); elsewhere the workers share the dataset's insides."""
    with ThreadLoader(OwnWords(6), batch_size=None, **workers_in(mode, 2)) as loader:
        assert loader.worker_copy == ("pickle" if parallel else "shallow")
        got = [t.tolist() for t in loader]
    assert got == [[i, int(parallel)] for i in range(6)]


@pytest.mark.parametrize("given", ["shallow", "deep", "pickle"])
def test_a_worker_copy_given_is_kept_on_either_build(parallel, given):
    assert ThreadLoader(HotIds(4), num_workers=2, worker_copy=given).worker_copy == given


def test_none_set_after_construction_is_the_default_and_a_bad_value_names_the_argument(parallel):
    loader = ThreadLoader(HotIds(4), num_workers=2, worker_copy="deep")
    loader.worker_copy = None
    assert loader.worker_copy == ("pickle" if parallel else "shallow")
    with pytest.raises(ValueError, match=r"worker_copy must be one of .*or None.*got 'full'"):
        loader.worker_copy = "full"
    with pytest.raises(ValueError, match="worker_copy"):
        check_worker_copy(1)


# -- a dataset that cannot be pickled ----------------------------------------------------------


@pytest.mark.parametrize("persistent_workers", [False, True])
def test_an_unpicklable_dataset_loads_with_one_warning_per_loader(parallel, persistent_workers):
    """Where the default is ``"pickle"``, a dataset that cannot be pickled gets shallow copies
    (its workers share the lock), with one warning for the loader that says the default asked
    for pickling and how to choose: not one per epoch, nor per worker."""
    ds = OwnWords(6, lock=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = ThreadLoader(ds, batch_size=None, num_workers=2, persistent_workers=persistent_workers)
        with loader:
            epochs = [[t.tolist() for t in loader] for _ in range(3)]
    assert epochs == [[[i, 0] for i in range(6)]] * 3
    assert loader.worker_copy == "shallow"
    relevant = [str(w.message) for w in caught if "pickle" in str(w.message)]
    if not parallel:  # shallow by default: nothing to say
        assert relevant == []
        return
    assert len(relevant) == 1, relevant
    assert "OwnWords cannot be pickled" in relevant[0]
    assert "defaults to 'pickle'" in relevant[0] and "worker_copy='shallow'" in relevant[0]
    assert caught[[str(w.message) for w in caught].index(relevant[0])].filename == __file__  # the user's line


def test_a_dataset_that_cannot_even_be_copied_is_shared_with_one_warning(parallel):
    """Neither pickled nor copied: the workers share it, as torch's forked workers would, and the
    one warning says so (not a second one about the default's pickle)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with ThreadLoader(Uncopyable(10), num_workers=2) as loader:
            got = sorted(plain(list(loader)))
    assert got == [[i] for i in range(10)]
    assert loader.worker_copy == "shallow"
    said = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(said) == 1 and "cannot be copied" in said[0] and "share it" in said[0], said


def test_without_workers_nothing_is_pickled_and_nothing_is_said(parallel):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loader = ThreadLoader(OwnWords(4, lock=True), batch_size=None)
    assert loader.worker_copy == ("pickle" if parallel else "shallow")  # what a later num_workers would use
    assert [t.tolist() for t in loader] == [[i, 0] for i in range(4)]


# -- torch's batches, every worker_copy ----------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("worker_copy", COPIES)
def test_map_style_batches_with_global_draws_are_torchs_for_every_worker_copy(parallel, mode, worker_copy):
    """Items that draw from torch's global and thread-safe generators: each worker's copy draws
    as torch's worker ``i`` does, whatever the copy is made of (the last column, a draw from
    ``WorkerInfo.rng``, is this package's own: torch's has none to compare)."""
    gen = torch.Generator().manual_seed(7)
    (ref,) = torch_epochs(GlobalDraws(12), 1, batch_size=3, num_workers=2, generator=gen)
    loader = ThreadLoader(
        GlobalDraws(12),
        batch_size=3,
        generator=torch.Generator().manual_seed(7),
        worker_copy=worker_copy,
        **workers_in(mode, 2),
    )
    with loader:
        got = list(loader)
    assert_same([batch[:, :4] for batch in got], [batch[:, :4] for batch in ref])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("worker_copy", COPIES)
def test_iterable_batches_are_torchs_for_every_worker_copy(parallel, mode, worker_copy):
    ref = torch_epochs(Shards(10, pause=None), 2, batch_size=2, num_workers=2)
    with ThreadLoader(Shards(10, pause=None), batch_size=2, worker_copy=worker_copy, **workers_in(mode, 2)) as loader:
        got = [list(loader) for _ in range(2)]
    assert_same(got, ref)


@pytest.mark.parametrize("worker_copy", COPIES)
def test_async_batches_are_torchs_for_every_worker_copy(parallel, worker_copy):
    """torch cannot await an item: its batches of the same items written blocking are the oracle."""
    gen = torch.Generator().manual_seed(3)
    (ref,) = torch_epochs(Items(10), 1, batch_size=3, shuffle=True, num_workers=2, generator=gen)
    loader = ThreadLoader(
        AsyncItems(10),
        batch_size=3,
        shuffle=True,
        num_workers=2,
        generator=torch.Generator().manual_seed(3),
        worker_copy=worker_copy,
    )
    with loader:
        got = list(loader)
    assert_same(got, ref)
