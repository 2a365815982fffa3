"""Every setting kept: each parameter of ``ThreadLoader``'s signature, given a value other than
its default, reads back under its own name (as Lightning reads a loader's arguments back:
``vars(loader)``, and ``multiprocessing_context``) and survives ``copy``, ``pickle``,
Lightning's re-instantiation (its own ``_update_dataloader``), accelerate's
``prepare_threadloader`` and the HF Trainer mixin; set between epochs (threads and worker
processes), it is used from the next epoch, or refused naming it where the loader documents it
as fixed after construction. The parameters are read from the signature: a new one is covered
without changing this file, or fails here asking for a value."""

from __future__ import annotations

import copy
import inspect
import os
import pickle
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, DistributedSampler, RandomSampler, default_collate

from tests.fixtures.datasets import RangeDataset
from tests.fixtures.frameworks import init_nothing
from torch_threadloader import ThreadLoader
from torch_threadloader.loader import FIXED_AFTER_INIT

#: The arguments that say how the dataset is sampled and batched: a rebuild gives its own.
GIVEN_BY_REBUILD = frozenset({"dataset", "batch_size", "shuffle", "sampler", "batch_sampler", "drop_last"})


def collate_twice(items: list[Any]) -> Any:
    return default_collate(items) * 2


def cost_of_one(sample: Any) -> int:
    return 1


_COST = {"max_batch_cost": 3, "sample_cost": cost_of_one}

_CPU = min(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0

#: A value other than the default for each parameter, and the arguments it needs beside it.
VALUES: dict[str, tuple[Any, dict[str, Any]]] = {
    "dataset": (RangeDataset(12), {}),
    "batch_size": (4, {}),
    "shuffle": (True, {}),
    "sampler": (RandomSampler(range(16)), {}),
    "batch_sampler": ([[0, 1], [2, 3]], {"batch_size": 1}),
    "drop_last": (True, {}),
    "num_workers": (3, {}),
    "collate_fn": (collate_twice, {}),
    "pin_memory": (True, {}),
    "timeout": (5.0, {"num_workers": 2}),
    "worker_init_fn": (init_nothing, {}),
    "multiprocessing_context": ("spawn", {"num_workers": 2}),
    "generator": (torch.Generator().manual_seed(3), {}),
    "prefetch_factor": (3, {"num_workers": 2}),
    "persistent_workers": (True, {"num_workers": 2}),
    "pin_memory_device": ("cpu", {}),
    "in_order": (False, {"num_workers": 2}),
    "item_concurrency": (2, {}),
    "return_indices": (True, {}),
    "stats": (True, {}),
    "on_error": ("skip", {}),
    "max_errors": (3, {"on_error": "skip"}),
    "max_bytes_in_flight": (1 << 20, {}),
    "worker_processes": (2, {}),
    "process_nice": (5, {"worker_processes": 1}),
    "process_affinity": ([[_CPU]], {"worker_processes": 1}),
    "worker_method": ("multiprocessing", {"num_workers": 2}),
    "worker_copy": ("deep", {}),
    "per_sample_rng": (True, {"num_workers": 2}),
    "defer_stragglers": (True, {"num_workers": 2}),
    "straggler_window": (64, {"defer_stragglers": True, "num_workers": 2}),
    "max_batch_cost": (3, {"sample_cost": cost_of_one}),
    "sample_cost": (cost_of_one, {"max_batch_cost": 3}),
    "cost_mode": ("padded", _COST),
    "group_window": (8, _COST),
    "cost_sync": (False, _COST),
    "stall_report_after": (60.0, {}),
}

PARAMETERS = [name for name in inspect.signature(ThreadLoader).parameters]


def _value(name: str) -> tuple[Any, dict[str, Any]]:
    """The value for ``name``: from :data:`VALUES`, or made from its default (a new parameter)."""
    if name in VALUES:
        return VALUES[name]
    default = inspect.signature(ThreadLoader).parameters[name].default
    if isinstance(default, bool):
        return not default, {}
    if isinstance(default, int):
        return default + 1, {}
    pytest.fail(f"no value other than its default for the new parameter {name!r}: add one to VALUES")


def _read(loader: ThreadLoader[Any], name: str) -> Any:
    """``name`` read back as Lightning reads it (``vars(loader)``; ``multiprocessing_context``
    as the attribute; torch keeps ``shuffle`` as its sampler)."""
    if name == "multiprocessing_context":
        return loader.multiprocessing_context
    if name == "shuffle":
        return isinstance(loader.sampler, RandomSampler)
    kept = vars(loader)
    assert name in kept, f"{name!r} is not kept under its own name"
    return kept[name]


def _plain(name: str, value: Any) -> Any:
    """``value`` of ``name`` in a form compared with ``==``."""
    if name == "multiprocessing_context":
        return value if value is None or isinstance(value, str) else value.get_start_method()
    if name == "generator":
        return None if value is None else bytes(value.get_state().tolist())
    if name == "process_affinity":
        return None if value is None else tuple(frozenset(cpus) for cpus in value)
    if name == "dataset":
        return type(value), value.n
    if name == "sampler":
        return type(value)
    if name == "batch_sampler" and isinstance(value, BatchSampler):
        return type(value.sampler), value.batch_size, value.drop_last
    return value


def _readback(loader: ThreadLoader[Any], names: list[str]) -> dict[str, Any]:
    return {name: _plain(name, _read(loader, name)) for name in names}


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pin_memory without CUDA, multiprocessing_context on threads
        yield


def _built(name: str) -> tuple[ThreadLoader[Any], Any]:
    value, extra = _value(name)
    kwargs: dict[str, Any] = {"batch_size": 2, **extra, name: value}
    dataset = kwargs.pop("dataset", RangeDataset(16))
    if "batch_sampler" in kwargs:
        kwargs.pop("batch_size")
    return ThreadLoader(dataset, **kwargs), value


REBUILT = [name for name in PARAMETERS if name not in GIVEN_BY_REBUILD]


@pytest.mark.parametrize("name", PARAMETERS)
def test_a_parameter_reads_back_under_its_own_name_and_survives_copy_and_pickle(name: str) -> None:
    loader, value = _built(name)
    with loader:
        assert _plain(name, _read(loader, name)) == _plain(name, value)
        every = _readback(loader, PARAMETERS)
        for twin in (copy.copy(loader), copy.deepcopy(loader), pickle.loads(pickle.dumps(loader))):
            with twin:
                assert _readback(twin, PARAMETERS) == every


@pytest.mark.parametrize("name", REBUILT)
def test_a_parameter_survives_lightnings_re_instantiation(name: str) -> None:
    pytest.importorskip("lightning")
    from lightning.pytorch.trainer.states import RunningStage
    from lightning.pytorch.utilities.data import _update_dataloader

    loader, value = _built(name)
    sampler: DistributedSampler[Any] = DistributedSampler(loader.dataset, num_replicas=2, rank=1, shuffle=False)
    with loader, _update_dataloader(loader, sampler, mode=RunningStage.TRAINING) as rebuilt:
        assert type(rebuilt) is ThreadLoader and rebuilt.sampler is sampler
        assert _plain(name, _read(rebuilt, name)) == _plain(name, value)
        assert _readback(rebuilt, REBUILT) == _readback(loader, REBUILT)


@pytest.mark.parametrize("name", REBUILT)
def test_a_parameter_survives_prepare_threadloader(name: str) -> None:
    pytest.importorskip("accelerate")
    from accelerate import Accelerator

    from torch_threadloader.integrations.accelerate import prepare_threadloader

    loader, value = _built(name)
    with loader, prepare_threadloader(Accelerator(cpu=True), loader, register=False) as prepared:
        assert _plain(name, _read(prepared, name)) == _plain(name, value)
        assert _readback(prepared, REBUILT) == _readback(loader, REBUILT)


def test_every_parameter_given_to_the_trainer_mixin_reaches_its_loader(tmp_path: Any) -> None:
    pytest.importorskip("transformers")
    from tests.integrations.test_transformers import trainer

    hf = trainer(tmp_path)
    lost = []
    for name in REBUILT:
        value, extra = _value(name)
        hf.threadloader_kwargs = {**extra, name: value}
        with hf.get_train_dataloader() as loader:
            if _plain(name, _read(loader, name)) != _plain(name, value):
                lost.append(f"{name}={value!r} read back as {_read(loader, name)!r}")
    assert lost == []


def test_skip_first_batches_counts_batches_in_straggler_mode() -> None:
    pytest.importorskip("accelerate")
    from torch_threadloader.integrations.accelerate import skip_first_batches

    with ThreadLoader(RangeDataset(40), batch_size=4, num_workers=2, defer_stragglers=True) as loader:
        it = iter(loader)
        first = [next(it).tolist() for _ in range(3)]
        del it
        assert skip_first_batches(loader, 3) is loader
        with pytest.raises(ValueError, match="has 3 batches"):
            skip_first_batches(loader, 12)
        rest = [b.tolist() for b in loader]
    assert all(len(b) == 4 for b in first + rest)
    assert sorted(v for b in first + rest for v in b) == list(range(40))  # each sample once


# -- a change between epochs -----------------------------------------------------------------------


class Drawn(Dataset[torch.Tensor]):
    """Items ``0..15``, each with a draw from torch's global generator (the worker's, or the
    sample's with ``per_sample_rng``), the mark a ``worker_init_fn`` left on the worker's copy,
    and the nice level and the number of CPUs of the thread that loads it: a setting that reaches
    the workers shows in the items."""

    mark = 0

    def __len__(self) -> int:
        return 16

    def __getitem__(self, i: int) -> torch.Tensor:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0
        return torch.tensor([i, self.mark, int(torch.randint(1 << 30, ())), os.nice(0), cpus])


def init_marks(worker_id: int) -> None:
    info = torch.utils.data.get_worker_info()
    assert info is not None
    info.dataset.mark = 100 + worker_id  # type: ignore[attr-defined]


#: Values that show in :class:`Drawn`'s items where :data:`VALUES`' do not (else :func:`_value`'s).
CHANGED_VALUES: dict[str, tuple[Any, dict[str, Any]]] = {
    "worker_init_fn": (init_marks, {"num_workers": 2}),
}

#: Settings whose batches hold the samples in an order that is not the seed's: compared as the
#: samples of the epoch, sorted.
UNORDERED = frozenset({"in_order", "defer_stragglers", "straggler_window"})
#: Settings whose items draw on concurrent threads from one generator, or on whichever worker is
#: free, or from the process's shared state (own_random_state=False): compared without the draws.
RACING_DRAWS = frozenset({"in_order", "item_concurrency", "defer_stragglers", "straggler_window", "own_random_state"})

#: Where the workers run: threads, and worker processes.
WHERE: dict[str, dict[str, Any]] = {
    "threads": {},
    "worker processes": {"worker_processes": 2, "num_workers": 1},
}


def _refused_by_torch() -> frozenset[str]:
    """The parameters ``torch.utils.data.DataLoader`` refuses to set after construction."""
    refused = set()
    for name in inspect.signature(DataLoader).parameters:
        loader = DataLoader(range(4))
        try:
            setattr(loader, name, getattr(loader, name, None))
        except ValueError:
            refused.add(name)
    return frozenset(refused)


REFUSED_BY_TORCH = _refused_by_torch()
CHANGED = [name for name in PARAMETERS if name not in GIVEN_BY_REBUILD]


def _fixed_after_init(loader: ThreadLoader[Any], name: str) -> bool:
    """``name`` cannot change after construction, as the loader documents (and as torch refuses
    ``persistent_workers``); a start method cannot change for running worker processes."""
    if name in FIXED_AFTER_INIT or name in REFUSED_BY_TORCH:
        return True
    return name == "multiprocessing_context" and loader.worker_processes > 0


def _changed_value(name: str) -> tuple[Any, dict[str, Any]]:
    value, extra = CHANGED_VALUES[name] if name in CHANGED_VALUES else _value(name)
    if isinstance(value, torch.Generator):  # each loader its own, in the same state
        value = torch.Generator().set_state(value.get_state())
    return value, extra


def _as_lists(batch: Any) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.tolist()
    if isinstance(batch, (list, tuple)):
        return [_as_lists(part) for part in batch]
    return batch


def _epoch(loader: ThreadLoader[Any], name: str) -> Any:
    """One epoch of ``loader``, from torch's global seed 0, as compared for a change of ``name``."""
    torch.manual_seed(0)
    batches = [_as_lists(batch) for batch in loader]
    if name in RACING_DRAWS:
        batches = [[[x for k, x in enumerate(row) if k != 2] for row in batch] for batch in batches]
    if name in UNORDERED:
        return sorted(row for batch in batches for row in batch)
    return batches


@pytest.mark.parametrize("where", list(WHERE))
@pytest.mark.parametrize("name", CHANGED)
def test_a_parameter_changed_between_epochs_is_used_from_the_next_epoch_or_refused(name: str, where: str) -> None:
    """Set between epochs, a parameter gives the epochs of a loader built with it (counted
    alike: the same draws), or is refused naming it where the loader documents it as fixed;
    a value the constructor refuses beside the others is refused alike."""
    value, extra = _changed_value(name)
    kwargs: dict[str, Any] = {"batch_size": 2, **WHERE[where], **extra}
    try:
        loader = ThreadLoader(Drawn(), **kwargs)
    except ValueError as exc:
        pytest.skip(f"{name} is set beside {extra}, which {where} refuse: {exc}")
    try:
        fresh = ThreadLoader(Drawn(), **{**kwargs, name: _changed_value(name)[0]})
    except (ValueError, TypeError) as exc:
        refused: BaseException | None = exc
    else:
        refused = None
    with loader:
        assert _epoch(loader, name), "the epoch yielded no batch"
        if refused is not None:  # as the constructor refuses it
            with pytest.raises(type(refused)) as raised:
                setattr(loader, name, value)
            assert str(raised.value) == str(refused)
            return
        try:
            setattr(loader, name, value)
        except ValueError as exc:
            fresh.close()
            assert _fixed_after_init(loader, name), (
                f"{name} is refused after construction, and documented as settable: {exc}"
            )
            assert name in str(exc), exc
            return
        assert not _fixed_after_init(loader, name), f"{name}, documented as fixed after construction, was set"
        with fresh:
            _epoch(fresh, name)  # the same number of epochs before: the same epoch's draws
            if isinstance(value, torch.Generator):  # and the generator where the fresh one left its own
                value.set_state(fresh.generator.get_state())
            assert _epoch(loader, name) == _epoch(fresh, name), f"{name}={value!r} set between epochs"
