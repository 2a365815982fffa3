"""An error raised by ``next()`` names, in its notes, the sample it came from and the stage it
came from (``__getitem__``, the iterable's iterator, ``collate_fn``, ``worker_init_fn``), in
every mode, and no note names a stage it did not come from."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import Dataset, IterableDataset

from torch_threadloader import ThreadLoader
from torch_threadloader.worker_info import get_worker_info

pytestmark = pytest.mark.usefixtures("no_child_left")

BAD = 5


class FailsAtFive(Dataset[int]):
    """Items ``0..11``; ``dataset[5]`` raises (``ok=True``: none does)."""

    def __init__(self, ok: bool = False) -> None:
        self.ok = ok

    def __len__(self) -> int:
        return 12

    def __getitem__(self, i: int) -> int:
        if i == BAD and not self.ok:
            raise ValueError(f"bad sample {i}")
        return i


class AsyncFailsAtFive(FailsAtFive):
    async def __getitem__(self, i: int) -> int:  # type: ignore[override]
        return super().__getitem__(i)


class StreamFailsAtFive(IterableDataset[int]):
    """``range(12)`` split between workers (``i % n == id``); producing 5 raises (``ok=True``: never)."""

    def __init__(self, ok: bool = False) -> None:
        self.ok = ok

    def __iter__(self) -> Any:
        info = get_worker_info()
        n, w = (info.num_workers, info.id) if info is not None else (1, 0)
        for i in range(w, 12, n):
            if i == BAD and not self.ok:
                raise ValueError(f"bad sample {i}")
            yield i


def collate_fails_on_five(batch: list[int]) -> list[int]:
    if BAD in batch:
        raise ValueError("collate_fn refuses the batch holding 5")
    return batch


#: name -> (dataset class, loader arguments, what a __getitem__ error's note says, what a
#: collate_fn error's note says).
MODES: dict[str, tuple[type[Any], dict[str, Any], str, str]] = {
    "sync, 0 workers": (FailsAtFive, {"num_workers": 0}, "__getitem__(5)", "indices [4, 5, 6, 7]"),
    "sync, 2 workers": (FailsAtFive, {"num_workers": 2}, "__getitem__(5)", "indices [4, 5, 6, 7]"),
    "item_concurrency 3": (
        FailsAtFive,
        {"num_workers": 2, "item_concurrency": 3},
        "__getitem__(5)",
        "indices [4, 5, 6, 7]",
    ),
    "async, 0 workers": (AsyncFailsAtFive, {"num_workers": 0}, "__getitem__(5)", "indices [4, 5, 6, 7]"),
    "async, 2 workers": (AsyncFailsAtFive, {"num_workers": 2}, "__getitem__(5)", "indices [4, 5, 6, 7]"),
    "IterableDataset": (
        StreamFailsAtFive,
        {"num_workers": 2},
        "the dataset's iterator, at sample #2 of worker 1's iterator",
        "samples #0 to #3 of worker 1's iterator",
    ),
    "defer_stragglers": (
        FailsAtFive,
        {"num_workers": 2, "defer_stragglers": True},
        "__getitem__(5)",
        "for the batch of indices [",  # the samples that were ready: any four, 5 among them
    ),
    "worker processes": (
        FailsAtFive,
        {"num_workers": 1, "worker_processes": 2},
        "__getitem__(5)",
        "indices [4, 5, 6, 7]",
    ),
    "stats, 0 workers": (FailsAtFive, {"num_workers": 0, "stats": True}, "__getitem__(5)", "indices [4, 5, 6, 7]"),
    "stats, 2 workers": (FailsAtFive, {"num_workers": 2, "stats": True}, "__getitem__(5)", "indices [4, 5, 6, 7]"),
    "stats, item_concurrency 3": (
        FailsAtFive,
        {"num_workers": 2, "item_concurrency": 3, "stats": True},
        "__getitem__(5)",
        "indices [4, 5, 6, 7]",
    ),
}


def first_error(loader: ThreadLoader[Any]) -> BaseException:
    try:
        for _ in loader:
            pass
    except Exception as exc:
        return exc
    finally:
        loader.close()
    raise AssertionError("no batch raised")


def notes_of(exc: BaseException) -> list[str]:
    return [note for note in getattr(exc, "__notes__", []) if isinstance(note, str)]


@pytest.mark.parametrize("mode", list(MODES))
def test_a_sample_error_names_its_sample_and_stage(mode: str) -> None:
    cls, kwargs, expected, _ = MODES[mode]
    exc = first_error(ThreadLoader(cls(), batch_size=4, **kwargs))
    assert isinstance(exc, ValueError) and "bad sample 5" in str(exc)
    notes = notes_of(exc)
    assert any(f"raised in {expected}" in note for note in notes), notes
    assert not any("collate" in note for note in notes), notes


@pytest.mark.parametrize("mode", list(MODES))
def test_a_collate_error_names_collate_fn_and_the_batch(mode: str) -> None:
    cls, kwargs, _, batch = MODES[mode]
    exc = first_error(ThreadLoader(cls(ok=True), batch_size=4, collate_fn=collate_fails_on_five, **kwargs))
    assert "collate_fn refuses" in str(exc)
    notes = notes_of(exc)
    assert any("raised in collate_fn" in note and batch in note for note in notes), notes
    assert not any("__getitem__" in note or "iterator," in note for note in notes), notes


def init_fails(worker_id: int) -> None:
    raise ValueError(f"worker_init_fn refuses worker {worker_id}")


@pytest.mark.parametrize("mode", ["sync, 2 workers", "async, 2 workers", "IterableDataset", "worker processes"])
def test_a_worker_init_fn_error_names_it_and_the_worker(mode: str) -> None:
    cls, kwargs, _, _ = MODES[mode]
    exc = first_error(ThreadLoader(cls(ok=True), batch_size=4, worker_init_fn=init_fails, **kwargs))
    assert "worker_init_fn refuses worker 0" in str(exc)
    notes = notes_of(exc)
    assert any("raised in worker_init_fn(0)" in note for note in notes), notes
    assert not any("collate" in note or "__getitem__" in note for note in notes), notes


@pytest.mark.parametrize("kind", ["list", "tuple", "range", "tensor"])
@pytest.mark.parametrize("bad", [0, 3, 6])
def test_the_failing_index_is_found_after_the_error_in_any_sequence_of_indices(kind: str, bad: int) -> None:
    from torch_threadloader.fetch.getters import failed_index

    values = list(range(10, 17))
    indices = {"list": values, "tuple": tuple(values), "range": range(10, 17), "tensor": torch.tensor(values)}[kind]

    def getitem(i: Any) -> int:
        if int(i) == values[bad]:
            raise ValueError(i)
        return int(i)

    left = iter(indices)
    with pytest.raises(ValueError):
        [getitem(i) for i in left]
    assert int(failed_index(indices, left)) == values[bad]
    assert failed_index((i for i in values), iter(values)) is None  # no positions: not named
