"""Ray Train: prepare a ThreadLoader in a Ray Train worker and keep it a ThreadLoader.

``ray.train.torch.prepare_data_loader(loader)`` rebuilds a plain ``DataLoader`` (with a
``DistributedSampler``) when there is more than one worker, and wraps it to move batches to
the device: a ThreadLoader's threads, resume and stats would be gone. With
``add_dist_sampler=False, move_to_device=False`` it returns the loader as it is, which is
what :func:`prepare_data_loader` here builds on: it gives the ThreadLoader the
``DistributedSampler`` Ray would (this worker's rank and the world size from
``ray.train.get_context()``, ``shuffle`` unless the loader's sampler is sequential), and
returns a :class:`DeviceThreadLoader` that moves batches to ``ray.train.torch.get_device()``.

Call ``loader.sampler.set_epoch(epoch)`` before each epoch, as with Ray's. Importing this
module needs ``ray[train]``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, TypeVar

import torch
from torch.utils.data import DistributedSampler, IterableDataset, SequentialSampler

from torch_threadloader.integrations._rebuild import check_plain_threadloader, loader_settings
from torch_threadloader.loader import ThreadLoader

__all__ = ["DeviceThreadLoader", "prepare_data_loader", "to_device"]

T_co = TypeVar("T_co", covariant=True)


def to_device(batch: Any, device: torch.device, non_blocking: bool = False) -> Any:
    """``batch`` with every tensor in it (in dicts, lists, tuples, named tuples) moved to
    ``device``; anything else as it is (Ray's own rule)."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, Mapping):
        return type(batch)({k: to_device(v, device, non_blocking) for k, v in batch.items()})  # type: ignore[call-arg]
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(to_device(v, device, non_blocking) for v in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(v, device, non_blocking) for v in batch)
    return batch


class DeviceThreadLoader(ThreadLoader[T_co]):
    """A ThreadLoader whose batches are moved to ``device`` as ``next()`` hands them out
    (``non_blocking`` when the batches are pinned). Takes ThreadLoader's arguments plus
    ``device`` and ``non_blocking``."""

    def __init__(self, *args: Any, device: torch.device, non_blocking: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.device = torch.device(device)
        self.non_blocking = bool(non_blocking)

    def __iter__(self) -> _DeviceEpoch:  # type: ignore[override]
        return _DeviceEpoch(ThreadLoader.__iter__(self), self.device, self.non_blocking)


class _DeviceEpoch(Iterator[Any]):
    def __init__(self, inner: Iterator[Any], device: torch.device, non_blocking: bool) -> None:
        self._inner = inner
        self._device = device
        self._non_blocking = non_blocking

    def __next__(self) -> Any:
        return to_device(next(self._inner), self._device, self._non_blocking)

    def __len__(self) -> int:
        return len(self._inner)  # type: ignore[arg-type]

    def close(self) -> None:
        """Stop the ThreadLoader's epoch and its threads."""
        close = getattr(self._inner, "close", None)
        if close is not None:
            close()


def prepare_data_loader(
    loader: ThreadLoader[Any], *, add_dist_sampler: bool = True, move_to_device: bool = True
) -> ThreadLoader[Any]:
    """``ray.train.torch.prepare_data_loader`` for a ThreadLoader, in a Ray Train worker.

    With more than one worker and ``add_dist_sampler``, a map-style loader without a
    ``DistributedSampler`` is rebuilt with one (this worker's shard, ``shuffle`` unless its
    sampler was sequential; Ray's rule); with ``move_to_device`` the result is a
    :class:`DeviceThreadLoader` for ``ray.train.torch.get_device()`` (on CPU, where nothing
    moves, the loader as it is). Otherwise ``loader`` itself is returned.
    """
    import ray.train
    import ray.train.torch

    check_plain_threadloader(loader)
    context = ray.train.get_context()
    world, rank = context.get_world_size(), context.get_world_rank()
    dataset: Any = loader.dataset
    batching: dict[str, Any] | None = None
    if (
        world > 1
        and add_dist_sampler
        and not isinstance(loader.sampler, DistributedSampler)
        and not isinstance(dataset, IterableDataset)
    ):
        shuffle = not isinstance(loader.sampler, SequentialSampler)
        sampler: DistributedSampler[Any] = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=shuffle)
        batching = {"sampler": sampler, "batch_size": loader.batch_size, "drop_last": loader.drop_last}
    device = torch.device(ray.train.torch.get_device()) if move_to_device else torch.device("cpu")
    if device.type == "cpu" and batching is None:
        return loader
    if batching is None:
        batching = (
            {"batch_sampler": loader.batch_sampler}
            if loader.batch_sampler is not None
            else {
                "sampler": loader.sampler,
                "batch_size": None,
            }
        )
    settings = loader_settings(loader)
    if device.type == "cpu":
        return ThreadLoader(dataset, **batching, **settings)
    return DeviceThreadLoader(dataset, **batching, **settings, device=device, non_blocking=loader.pin_memory)
