"""Drop-in to the last argument: what code written for torch's ``DataLoader`` does with a
``ThreadLoader`` works, with torch's ``DataLoader`` as the oracle where it defines the behaviour.

* Errors: every exception class the loader raises is rebuilt by torch's own error transport
  (``ExceptionWrapper.reraise()`` calls ``exc_type(message)``) as itself, and keeps its fields
  through ``pickle`` and ``copy``.
* ``multiprocessing_context``: accepted, checked and refused as torch's setter does; on threads a
  warning says it has no effect.
* ``prefetch_factor``: refused as torch refuses it.
"""

from __future__ import annotations

import copy
import gc
import importlib
import multiprocessing
import pickle
import pkgutil
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch._utils import ExceptionWrapper
from torch.utils.data import DataLoader

import datapipes as dp
import torch_threadloader
from tests.fixtures.datasets import FileGate, RangeDataset, UnshardedStream, WaitsForFileAt
from torch_threadloader import LoaderTimeoutError, ThreadLoader
from torch_threadloader.processes import WorkerProcessError
from torch_threadloader.skip import TooManyErrors

OURS = ("torch_threadloader", "datapipes")


def _exception_classes() -> list[type[BaseException]]:
    """Every exception class defined in ``datapipes`` and ``torch_threadloader`` (warnings aside)."""
    found: dict[str, type[BaseException]] = {}
    for package in (dp, torch_threadloader):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            try:
                module = importlib.import_module(info.name)
            except ImportError as exc:  # an integration whose framework is not installed here
                missing = exc if isinstance(exc, ModuleNotFoundError) else exc.__cause__
                if not isinstance(missing, ModuleNotFoundError) or str(missing.name).startswith(OURS):
                    raise
                continue
            for value in vars(module).values():
                if (
                    isinstance(value, type)
                    and issubclass(value, BaseException)
                    and not issubclass(value, Warning)
                    and value.__module__ == module.__name__
                ):
                    found[f"{value.__module__}.{value.__qualname__}"] = value
    return [found[name] for name in sorted(found)]


# -- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", _exception_classes(), ids=lambda cls: cls.__qualname__)
def test_every_error_class_is_rebuilt_by_torchs_exception_wrapper_as_itself(cls: type[BaseException]) -> None:
    exc = cls("the message")
    assert str(exc) == "the message"
    wrapper = ExceptionWrapper((cls, exc, None), where="in DataLoader worker process 0")
    with pytest.raises(cls) as raised:
        wrapper.reraise()
    assert type(raised.value) is cls
    assert "the message" in str(raised.value) and "in DataLoader worker process 0" in str(raised.value)
    for twin in (pickle.loads(pickle.dumps(raised.value)), copy.copy(raised.value), copy.deepcopy(raised.value)):
        assert type(twin) is cls and str(twin) == str(raised.value)


def test_a_loaders_timeout_crosses_torchs_error_transport_as_a_loader_timeout(tmp_path: Path) -> None:
    gate = FileGate(tmp_path)  # item 2 waits until the test opens it
    with ThreadLoader(WaitsForFileAt(8, 2, gate.release), batch_size=2, num_workers=1, timeout=0.2) as loader:
        it = iter(loader)
        assert next(it).tolist() == [0, 1]
        try:
            with pytest.raises(LoaderTimeoutError) as raised:
                next(it)
        finally:
            gate.open()
        del it
    exc = raised.value
    assert (exc.timeout, exc.batch, exc.indices) == (0.2, 1, [2, 3])
    with pytest.raises(LoaderTimeoutError) as again:
        ExceptionWrapper((type(exc), exc, exc.__traceback__), where="in DataLoader worker thread 0").reraise()
    assert isinstance(again.value, RuntimeError) and isinstance(again.value, TimeoutError)
    assert "timed out after 0.2 seconds waiting for batch 1 (indices [2, 3])" in str(again.value)
    assert again.value.batch is None  # its fields are not in the message alone
    for twin in (pickle.loads(pickle.dumps(exc)), copy.copy(exc), copy.deepcopy(exc)):
        assert type(twin) is LoaderTimeoutError and str(twin) == str(exc)
        assert (twin.timeout, twin.batch, twin.indices) == (0.2, 1, [2, 3])


@pytest.mark.parametrize(
    "exc",
    [
        dp.NodeTimeoutError("ThreadMapper", 3, [6, 7], 0.5),
        dp.WorkerLostError("worker 1 is gone", worker="worker 1"),
        WorkerProcessError("lost", process=1, pid=4242, exitcode=-9),
        TooManyErrors(3, 2, [{"index": 5, "type": "KeyError", "message": "5"}]),
        LoaderTimeoutError(0.5, 3, [6, 7]),
    ],
    ids=type,
)
def test_errors_built_with_their_fields_keep_them_through_pickle_and_copy(exc: BaseException) -> None:
    exc.add_note("a note")
    for twin in (pickle.loads(pickle.dumps(exc)), copy.copy(exc), copy.deepcopy(exc)):
        assert type(twin) is type(exc) and str(twin) == str(exc)
        assert twin.__dict__ == exc.__dict__  # its fields and its notes


# -- multiprocessing_context ------------------------------------------------------------------


def _raised(build: Any) -> tuple[type[BaseException], str] | None:
    try:
        build()
    except Exception as exc:
        return type(exc), str(exc)
    return None


@pytest.mark.parametrize(
    ("num_workers", "context"),
    [(2, "nonesuch"), (2, 42), (0, "spawn"), (0, multiprocessing.get_context("spawn"))],
    ids=["not-a-start-method", "not-a-context", "no-workers", "no-workers-context-object"],
)
def test_multiprocessing_context_is_refused_as_torch_refuses_it(num_workers: int, context: Any) -> None:
    ds = RangeDataset(8)
    expected = _raised(lambda: DataLoader(ds, num_workers=num_workers, multiprocessing_context=context))
    assert expected is not None
    assert _raised(lambda: ThreadLoader(ds, num_workers=num_workers, multiprocessing_context=context)) == expected
    # set after construction: torch checks it there too
    theirs, ours = DataLoader(ds, num_workers=num_workers), ThreadLoader(ds, num_workers=num_workers)
    expected = _raised(lambda: setattr(theirs, "multiprocessing_context", context))
    assert expected is not None
    assert _raised(lambda: setattr(ours, "multiprocessing_context", context)) == expected
    assert ours.multiprocessing_context is None


@pytest.mark.parametrize("context", ["spawn", multiprocessing.get_context("forkserver")], ids=["name", "context"])
def test_multiprocessing_context_on_threads_is_kept_as_torch_keeps_it_with_one_warning(context: Any) -> None:
    ds = RangeDataset(10)
    torch.manual_seed(0)
    theirs = DataLoader(ds, batch_size=3, shuffle=True, num_workers=2, multiprocessing_context=context)
    expected = [b.tolist() for b in theirs]
    torch.manual_seed(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ours = ThreadLoader(ds, batch_size=3, shuffle=True, num_workers=2, multiprocessing_context=context)
    assert [str(w.message) for w in caught if "multiprocessing_context" in str(w.message)] == [
        f"multiprocessing_context={theirs.multiprocessing_context.get_start_method()!r} has no effect on "
        "ThreadLoader's workers: they are threads of this process (it starts worker processes, with "
        "worker_processes=P)"
    ]
    assert caught[0].filename == __file__  # it points at the line that built the loader
    assert type(ours.multiprocessing_context) is type(theirs.multiprocessing_context)
    with ours:
        assert [b.tolist() for b in ours] == expected
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        twin = pickle.loads(pickle.dumps(ours))
        ours.multiprocessing_context = None  # torch lets it be set later; None says nothing
    assert caught == []
    assert twin.multiprocessing_context.get_start_method() == theirs.multiprocessing_context.get_start_method()
    assert ours.multiprocessing_context is None


@pytest.mark.usefixtures("no_child_left")
def test_multiprocessing_context_starts_the_worker_processes_without_a_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loader = ThreadLoader(RangeDataset(6), batch_size=2, worker_processes=1, multiprocessing_context="spawn")
    with loader:
        assert loader.multiprocessing_context is not None
        assert loader.multiprocessing_context.get_start_method() == "spawn"
        assert loader._mp_context is loader.multiprocessing_context
        loader.multiprocessing_context = "spawn"  # the same start method: nothing changes
        with pytest.raises(ValueError, match=r"multiprocessing_context attribute should not be set.*worker_processes"):
            loader.multiprocessing_context = "forkserver"
        assert loader.multiprocessing_context.get_start_method() == "spawn"
        assert [b.tolist() for b in loader] == [[0, 1], [2, 3], [4, 5]]


# -- prefetch_factor --------------------------------------------------------------------------


class _AsyncRange(torch.utils.data.Dataset[int]):
    def __len__(self) -> int:
        return 8

    async def __getitem__(self, i: int) -> int:
        return i


PREFETCH_MODES: dict[str, tuple[Any, dict[str, Any]]] = {
    "threads": (RangeDataset(8), {}),
    "iterable": (UnshardedStream(8), {}),
    "async": (_AsyncRange(), {}),
    "stragglers": (RangeDataset(8), {"defer_stragglers": True}),
    "processes": (RangeDataset(8), {"worker_processes": 1}),
}


def _torchs_iter_error(loader: DataLoader[Any]) -> tuple[type[BaseException], str] | None:
    """What ``iter(loader)`` raises; the half-built iterator it leaves is collected quietly
    (its ``__del__`` fails on what its ``__init__`` never set)."""
    previous = sys.unraisablehook
    sys.unraisablehook = lambda _: None
    try:
        raised = _raised(lambda: iter(loader))
        gc.collect()
    finally:
        sys.unraisablehook = previous
    return raised


@pytest.mark.usefixtures("no_child_left")
@pytest.mark.parametrize("mode", list(PREFETCH_MODES))
def test_prefetch_factor_0_with_workers_is_refused_at_iter_as_torch_refuses_it(mode: str) -> None:
    ds, extra = PREFETCH_MODES[mode]
    expected = _torchs_iter_error(DataLoader(RangeDataset(8), batch_size=2, num_workers=2, prefetch_factor=0))
    assert expected is not None and "prefetch_factor" in expected[1]
    with ThreadLoader(ds, batch_size=2, num_workers=2, prefetch_factor=0, **extra) as ours:
        assert _raised(lambda: iter(ours)) == expected
    with ThreadLoader(ds, batch_size=2, num_workers=2, **extra) as ours:
        ours.prefetch_factor = 0  # set later: torch refuses it at iter() too
        assert _raised(lambda: iter(ours)) == expected
        ours.prefetch_factor = 1
        assert {v for b in ours for v in b.tolist()} == set(range(8))  # an IterableDataset: in each worker


@pytest.mark.parametrize(("num_workers", "prefetch_factor"), [(2, -1), (0, 2), (0, 0)])
def test_prefetch_factor_is_refused_at_construction_as_torch_refuses_it(num_workers: int, prefetch_factor: int) -> None:
    ds = RangeDataset(8)
    expected = _raised(lambda: DataLoader(ds, num_workers=num_workers, prefetch_factor=prefetch_factor))
    assert expected is not None
    assert _raised(lambda: ThreadLoader(ds, num_workers=num_workers, prefetch_factor=prefetch_factor)) == expected


@pytest.mark.parametrize("timeout", [1, 0.5])
def test_the_timeout_error_prints_the_timeout_as_given_as_torchs_does(timeout: float, tmp_path: Path) -> None:
    """torch's message is ``f"DataLoader timed out after {timeout} seconds"`` with the value as
    given: its own test matches ``timed out after \\d+ seconds`` for ``timeout=1``."""
    gate = FileGate(tmp_path)  # item 0 waits until the test opens it
    with ThreadLoader(WaitsForFileAt(4, 0, gate.release), batch_size=1, num_workers=1, timeout=timeout) as loader:
        try:
            with pytest.raises(LoaderTimeoutError, match=rf"DataLoader timed out after {timeout} seconds"):
                next(iter(loader))
        finally:
            gate.open()
