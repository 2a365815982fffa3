"""The loader's plan (torch_threadloader.plan): settled at construction, frozen, picklable,
rebuilt on a copy, and the one place the dataset's kind is decided."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest
import torch
from torch.utils.data import Dataset, IterableDataset

import datapipes as dp
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


class Stream(IterableDataset[int]):
    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(range(4))


@pytest.mark.parametrize(
    ("dataset", "kind"),
    [
        (Squares(), Kind.MAP),
        (AsyncSquares(), Kind.ASYNC),
        (Stream(), Kind.ITERABLE),
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
    assert not plan.lean
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.num_workers = 3  # type: ignore[misc]
    assert ThreadLoader(Squares(), batch_size=4)._plan.lean
    assert not ThreadLoader(Squares(), batch_size=4, stats=True)._plan.lean
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
