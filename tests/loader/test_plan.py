"""The loader's plan (torch_threadloader.plan): settled at construction, frozen, picklable,
rebuilt on a copy, and the one place the dataset's kind is decided."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest
import torch
from torch.utils.data import Dataset

import datapipes as dp
from tests.fixtures.datasets import UnshardedStream
from torch_threadloader import ThreadLoader
from torch_threadloader.plan import Kind, LoaderPlan


class Squares(Dataset[int]):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> int:
        return i * i


class AsyncSquares(Squares):
    async def __getitem__(self, i: int) -> int:  # type: ignore[override]
        return i * i


@pytest.mark.parametrize(
    ("dataset", "kind"),
    [
        (Squares(), Kind.MAP),
        (AsyncSquares(), Kind.ASYNC),
        (UnshardedStream(4), Kind.ITERABLE),
        (dp.IterableWrapper(range(3)), Kind.NODE),
    ],
)
def test_kind_is_decided_once_at_construction(dataset: object, kind: Kind) -> None:
    loader = ThreadLoader(dataset, batch_size=2)  # type: ignore[arg-type]
    assert loader._plan.kind is kind
    assert loader._plan.kind == kind.value  # a StrEnum: the old spelling still compares equal


def test_plan_is_frozen_and_reads_the_arguments() -> None:
    loader = ThreadLoader(Squares(), batch_size=4, num_workers=2, persistent_workers=True, prefetch_factor=3)
    plan = loader._plan
    assert (plan.num_workers, plan.persistent, plan.prefetch, plan.auto_collation) == (2, True, 3, True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.num_workers = 3  # type: ignore[misc]
    assert ThreadLoader(Squares(), batch_size=4, num_workers=1)._plan.persistent is False


def test_plan_pickles_and_a_copied_loader_gets_its_own() -> None:
    loader = ThreadLoader(Squares(), batch_size=4, num_workers=2, on_error="skip")
    plan = loader._plan
    assert pickle.loads(pickle.dumps(plan)) == plan
    assert isinstance(pickle.loads(pickle.dumps(plan)), LoaderPlan)
    clone = copy.deepcopy(loader)
    assert clone._plan == plan and clone._plan.skips
    assert [b.tolist() for b in clone] == [b.tolist() for b in loader]
    loader.close()
    clone.close()
    assert torch.equal(next(iter(ThreadLoader(Squares(), batch_size=8))), torch.tensor([i * i for i in range(8)]))


class WhichWorker(Squares):
    """Each item is the id of the worker that loaded it (-1 in the caller's thread)."""

    def __getitem__(self, i: int) -> int:
        info = torch.utils.data.get_worker_info()
        return -1 if info is None else info.id


@pytest.mark.parametrize("persistent", [False, True])
def test_a_setting_changed_after_construction_takes_effect_at_the_next_iter(persistent: bool) -> None:
    loader = ThreadLoader(WhichWorker(), batch_size=2, num_workers=1, persistent_workers=persistent)
    assert sorted({int(x) for b in loader for x in b}) == [0]
    loader.num_workers = 3
    loader.prefetch_factor = 4
    assert (loader._plan.num_workers, loader._plan.prefetch) == (3, 4)
    assert loader._plan.persistent is persistent
    # batch i is loaded by worker i % 3, as torch's DataLoader with 3 workers loads it
    assert [int(b[0]) for b in loader] == [0, 1, 2, 0]
    loader.num_workers = 0
    assert not loader._plan.persistent
    assert [int(b[0]) for b in loader] == [-1] * 4
    loader.close()


def test_a_refused_setting_leaves_the_plan_and_the_value_as_they_were() -> None:
    loader = ThreadLoader(UnshardedStream(4), batch_size=2)
    plan = loader._plan
    with pytest.raises(ValueError, match="item_concurrency=2 does not apply to an IterableDataset"):
        loader.item_concurrency = 2
    with pytest.raises(ValueError, match="item_concurrency must be a positive int"):
        loader.item_concurrency = 0
    with pytest.raises(ValueError, match="num_workers option should be non-negative"):
        loader.num_workers = -1
    with pytest.raises(ValueError, match="worker_processes attribute should not be set"):
        loader.worker_processes = 2
    with pytest.raises(ValueError, match="batch_size attribute should not be set"):  # torch's own refusal
        loader.batch_size = 3
    assert loader._plan is plan and loader.item_concurrency == 1 and loader.num_workers == 0


def test_a_timeout_set_later_is_refused_at_iter_without_workers_as_torch_refuses_it() -> None:
    loader = ThreadLoader(Squares(), batch_size=4)
    loader.timeout = 5
    assert loader._plan.timeout == 5.0
    with pytest.raises(AssertionError, match="requires timeout == 0"):
        iter(loader)
    loader.num_workers = 2
    assert [b.tolist() for b in loader] == [[0, 1, 4, 9], [16, 25, 36, 49]]
    loader.close()
