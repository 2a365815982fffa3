"""A ThreadLoader's own settings, to build another one with a new dataset or sampler."""

from __future__ import annotations

import inspect
from typing import Any

from torch_threadloader.loader import ThreadLoader

__all__ = ["check_plain_threadloader", "loader_settings"]

#: The arguments the caller gives: the dataset and how it is sampled and batched.
_GIVEN = frozenset({"dataset", "batch_size", "shuffle", "sampler", "batch_sampler", "drop_last"})


def check_plain_threadloader(loader: object, argument: str = "loader") -> ThreadLoader[Any]:
    """``loader`` if it is a ThreadLoader built as ``ThreadLoader(...)``; a ``TypeError``
    naming ``argument`` otherwise (another loader, or a subclass whose own behaviour a
    rebuild from ThreadLoader's settings would silently drop)."""
    if not isinstance(loader, ThreadLoader):
        raise TypeError(f"{argument} must be a torch_threadloader.ThreadLoader, got {type(loader).__name__}")
    if type(loader) is not ThreadLoader:
        raise TypeError(
            f"{argument} is a {type(loader).__name__}: pass the ThreadLoader(...) you built, once (a subclass, "
            "or a loader prepared already, would be rebuilt without what its class adds)"
        )
    return loader


def loader_settings(loader: ThreadLoader[Any]) -> dict[str, Any]:
    """The keyword arguments that build a ThreadLoader like ``loader``: every parameter of
    ``ThreadLoader``'s signature (a new one included), read back as a framework that rebuilds
    a loader reads it (``vars(loader)[name]``; ``multiprocessing_context`` as its attribute),
    less its dataset and how it samples and batches (``batch_size``, ``shuffle``, ``sampler``,
    ``batch_sampler``, ``drop_last``), which the caller gives. A parameter the loader does not
    keep is a ``TypeError`` naming it, never a setting silently left out."""
    kept = vars(loader)
    out: dict[str, Any] = {}
    for name in inspect.signature(ThreadLoader).parameters:
        if name in _GIVEN:
            continue
        if name == "multiprocessing_context":
            out[name] = loader.multiprocessing_context
        elif name in kept:
            out[name] = kept[name]
        else:
            raise TypeError(f"ThreadLoader keeps no attribute {name!r} for its parameter of that name")
    return out
