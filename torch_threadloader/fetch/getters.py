"""What a dataset offers the fetchers: whether it is async, and its batch getters
(``__getitems__``), seen through torch's ``Subset``, ``ConcatDataset`` and ``StackDataset``;
and the types of the getters and of the fetchers' loading functions."""

from __future__ import annotations

import inspect
import operator
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Protocol, TypeAlias, TypeGuard, TypeVar, cast

from torch.utils.data import ConcatDataset, StackDataset, Subset

from torch_threadloader.userdata import Batch, Index, Indices, Sample

__all__ = [
    "AsyncDataset",
    "AsyncGetItems",
    "GetItem",
    "GetItems",
    "ItemWindow",
    "Load",
    "Loaded",
    "MapDataset",
    "async_batch_getter",
    "batch_getter",
    "failed_index",
    "is_async_dataset",
]

_D = TypeVar("_D")
_In = TypeVar("_In")
_Out = TypeVar("_Out")

#: A dataset's ``__getitem__``: one sample by its index.
GetItem: TypeAlias = Callable[[Index], Sample]
#: A dataset's ``__getitems__``: a batch's samples by their indices, in one call.
GetItems: TypeAlias = Callable[[Indices], list[Sample]]
#: An async dataset's ``async def __getitems__``.
AsyncGetItems: TypeAlias = Callable[[Indices], Awaitable[list[Sample]]]
#: What a fetcher's loading function gives: the batch; with ``return_indices``, ``(indices, batch)``.
Loaded: TypeAlias = Batch | tuple[Indices, Batch]
#: A fetcher's loading function: the batch of the indices the sampler yielded for it.
Load: TypeAlias = Callable[[Indices], Loaded]


class ItemWindow(Protocol):
    """How a fetcher runs a batch's items at once: ``[fn(k) for k in keys]`` in key order, the
    first error in key order raised."""

    def __call__(self, fn: Callable[[_In], _Out], keys: Sequence[_In], /) -> list[_Out]: ...


class MapDataset(Protocol):
    """A map-style dataset, as the fetchers read it: a sample by its index."""

    def __getitem__(self, index: Index, /) -> Sample: ...


class AsyncDataset(Protocol):
    """An async map-style dataset: ``await dataset[index]`` is a sample."""

    def __getitem__(self, index: Index, /) -> Awaitable[Sample]: ...


def _torchs(dataset: object, cls: type[_D], name: str) -> TypeGuard[_D]:
    """Whether ``dataset``'s method ``name`` is ``cls``'s own (a torch wrapper not overridden)."""
    return isinstance(dataset, cls) and getattr(type(dataset), name, None) is getattr(cls, name)


def is_async_dataset(dataset: object) -> bool:
    """True when the dataset's ``__getitem__`` or ``__getitems__`` is a coroutine function,
    or it is torch's ``Subset`` of such a dataset, or its ``ConcatDataset`` of such datasets
    only (``random_split`` of an async dataset stays async). Raises ``ValueError`` for a
    ``ConcatDataset`` of async and sync datasets (its items would be half coroutines)."""
    if _torchs(dataset, Subset, "__getitem__"):
        return is_async_dataset(dataset.dataset)
    if _torchs(dataset, ConcatDataset, "__getitem__"):
        kinds = {is_async_dataset(part) for part in dataset.datasets}
        if len(kinds) > 1:
            raise ValueError(
                "dataset: a ConcatDataset of async and sync datasets cannot be loaded (some items would be "
                "coroutines); concatenate datasets of one kind"
            )
        return kinds == {True}
    if _torchs(dataset, StackDataset, "__getitem__"):
        parts = dataset.datasets
        if any(is_async_dataset(part) for part in (parts.values() if isinstance(parts, dict) else parts)):
            raise ValueError(
                "dataset: a StackDataset of async datasets cannot be loaded (its items would hold coroutines); "
                "stack the items in an async dataset of your own"
            )
    cls = type(dataset)
    return any(inspect.iscoroutinefunction(getattr(cls, name, None)) for name in ("__getitem__", "__getitems__"))


def async_batch_getter(dataset: object) -> AsyncGetItems | None:
    """The dataset's ``async def __getitems__``; for torch's ``Subset`` of a dataset with one,
    a coroutine function awaiting what the Subset's (sync) ``__getitems__`` returns (the inner
    dataset's coroutine); else ``None``."""
    getitems = getattr(dataset, "__getitems__", None)
    if getitems is None:
        return None
    if inspect.iscoroutinefunction(getitems):
        return cast(AsyncGetItems, getitems)
    if _torchs(dataset, Subset, "__getitems__") and async_batch_getter(dataset.dataset) is not None:

        async def subset_items(indices: Indices) -> list[Sample]:
            items: list[Sample] = await getitems(indices)
            return items

        return subset_items
    return None


def batch_getter(dataset: object) -> GetItems | None:
    """The dataset's ``__getitems__``, or ``None`` where it has none or where it is torch's
    ``Subset`` or ``StackDataset`` over datasets without one: those only call ``__getitem__``
    item after item, which ``item_concurrency`` does concurrently instead."""
    getitems = getattr(dataset, "__getitems__", None) or None
    if getitems is None:
        return None
    # Only a wrapper whose __getitem__ is torch's too: a subclass's own __getitem__ is not what
    # torch's __getitems__ (which torch's DataLoader calls) returns.
    if _torchs(dataset, Subset, "__getitems__") and _torchs(dataset, Subset, "__getitem__"):
        return getitems if batch_getter(dataset.dataset) is not None else None
    if _torchs(dataset, StackDataset, "__getitems__") and _torchs(dataset, StackDataset, "__getitem__"):
        stacked = dataset.datasets
        parts = stacked.values() if isinstance(stacked, dict) else stacked
        return getitems if any(batch_getter(part) is not None for part in parts) else None
    return cast(GetItems, getitems)


def failed_index(indices: Indices, left: Iterator[Index]) -> Index:
    """The index whose call raised while a loop took ``indices`` through the iterator ``left``:
    the last one it gave (``None`` for indices that cannot be read by position). Found after
    the error, so loading a batch pays nothing per item for naming it."""
    try:
        return indices[len(indices) - operator.length_hint(left) - 1]
    except (TypeError, IndexError):
        return None
