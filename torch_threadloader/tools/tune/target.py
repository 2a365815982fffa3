"""What ``bench`` loads: the factory ``MODULE:FACTORY`` imported and called, and what it
returned (a dataset, or a loader whose settings are reused) as a :class:`Target`."""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass, field
from typing import Any

from torch.utils.data import DataLoader, Dataset, IterableDataset, RandomSampler, SequentialSampler

__all__ = ["DEFAULT_BATCH_SIZE", "FactoryError", "Target", "describe", "load_target"]

#: The batch size when the factory returns a dataset (a loader's own is reused).
DEFAULT_BATCH_SIZE = 32


class FactoryError(ValueError):
    """``MODULE:FACTORY`` could not be imported or called, or returned something that is
    neither a dataset nor a loader. The message names the spec; the cause is chained."""


@dataclass
class Target:
    """What to load, and how: the dataset and the loader arguments every configuration shares
    (``num_workers`` and ``item_concurrency`` come from the grid)."""

    spec: str
    dataset: Any
    source: str  # "dataset", "DataLoader" or "ThreadLoader"
    kwargs: dict[str, Any] = field(default_factory=dict)  # shared by both loaders
    torch_kwargs: dict[str, Any] = field(default_factory=dict)  # torch's DataLoader only
    source_num_workers: int | None = None
    source_item_concurrency: int | None = None
    loader: DataLoader[Any] | None = None  # the factory's loader, closed by close()

    def close(self) -> None:
        """Close the loader the factory returned (a ThreadLoader keeps threads); idempotent."""
        close = getattr(self.loader, "close", None)
        if callable(close):
            close()

    @property
    def batch_size(self) -> int | None:
        value = self.kwargs.get("batch_size")
        return value if isinstance(value, int) else None

    @property
    def batching(self) -> str:
        """How items become batches: ``batch_size=N``, ``batch_sampler`` (the loader's own) or
        ``batch_size=None`` (no batching: each item is a batch of one sample)."""
        if "batch_sampler" in self.kwargs:
            return "batch_sampler"
        return f"batch_size={self.batch_size}"

    @property
    def torch_unsupported(self) -> str | None:
        """Why torch's DataLoader cannot run this dataset, or None when it can."""
        from torch_threadloader.fetch import is_async_dataset

        if is_async_dataset(self.dataset):
            return "an async dataset (async def __getitem__) runs only under ThreadLoader"
        return None


def load_target(spec: str, *, batch_size: int | None = None) -> Target:
    """Import ``MODULE:FACTORY`` (``FACTORY`` may be dotted: ``module:Class.make``), call it
    with no arguments and describe what it returned. ``batch_size`` overrides the loader's (or
    :data:`DEFAULT_BATCH_SIZE` for a dataset). Raises :class:`FactoryError` naming ``spec``."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise FactoryError(f"expected MODULE:FACTORY (e.g. mypkg.data:make_dataset), got {spec!r}")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` does: modules of the current directory
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise FactoryError(f"{spec}: cannot import module {module_name!r}: {type(exc).__name__}: {exc}") from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as exc:
            raise FactoryError(f"{spec}: {module_name} has no attribute {attr!r}") from exc
    if not callable(obj):
        raise FactoryError(f"{spec}: {attr} is a {type(obj).__name__}, not a function returning a dataset or loader")
    try:
        made = obj()
    except Exception as exc:
        raise FactoryError(f"{spec}: calling {attr}() raised {type(exc).__name__}: {exc}") from exc
    return describe(spec, made, batch_size=batch_size)


def describe(spec: str, made: Any, *, batch_size: int | None = None) -> Target:
    """The :class:`Target` for what the factory ``spec`` returned (a loader or a dataset)."""
    from torch_threadloader.loader import ThreadLoader

    if batch_size is not None and (isinstance(batch_size, bool) or batch_size < 1):
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    if isinstance(made, DataLoader):
        return _from_loader(spec, made, batch_size, thread=isinstance(made, ThreadLoader))
    sized = hasattr(made, "__getitem__") and hasattr(made, "__len__") and not isinstance(made, (str, bytes))
    if isinstance(made, Dataset) or sized:
        kwargs: dict[str, Any] = {"batch_size": batch_size or DEFAULT_BATCH_SIZE}
        return Target(spec, made, "dataset", kwargs)
    raise FactoryError(
        f"{spec} returned a {type(made).__name__}, which is neither a dataset (a torch Dataset, or an object "
        "with __getitem__ and __len__) nor a loader (torch.utils.data.DataLoader or ThreadLoader)"
    )


def _from_loader(spec: str, loader: DataLoader[Any], batch_size: int | None, *, thread: bool) -> Target:
    kwargs: dict[str, Any] = {
        "collate_fn": loader.collate_fn,
        "pin_memory": loader.pin_memory,
        "timeout": loader.timeout,
        "worker_init_fn": loader.worker_init_fn,
        "generator": loader.generator,
    }
    if getattr(loader, "in_order", True) is False:
        kwargs["in_order"] = False
    custom_batches = loader.batch_size is None and loader.batch_sampler is not None  # a batch_sampler of its own
    if custom_batches:
        if batch_size is not None:
            raise FactoryError(f"{spec}: the loader has a batch_sampler of its own; --batch-size does not apply")
        kwargs["batch_sampler"] = loader.batch_sampler
    else:
        kwargs["batch_size"] = batch_size if batch_size is not None else loader.batch_size
        kwargs["drop_last"] = loader.drop_last
        if not isinstance(loader.dataset, IterableDataset):
            sampler = loader.sampler
            if type(sampler) is RandomSampler and sampler.generator is None and not sampler.replacement:
                kwargs["shuffle"] = True
            elif type(sampler) is not SequentialSampler:
                kwargs["sampler"] = sampler
    torch_kwargs: dict[str, Any] = {}
    if loader.multiprocessing_context is not None and not thread:
        torch_kwargs["multiprocessing_context"] = loader.multiprocessing_context
    return Target(
        spec,
        loader.dataset,
        "ThreadLoader" if thread else "DataLoader",
        kwargs,
        torch_kwargs,
        source_num_workers=loader.num_workers,
        source_item_concurrency=getattr(loader, "item_concurrency", None) if thread else None,
        loader=loader,
    )
