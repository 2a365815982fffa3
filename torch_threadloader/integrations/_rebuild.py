"""A ThreadLoader's own settings, to build another one with a new dataset or sampler."""

from __future__ import annotations

from typing import Any

from torch_threadloader.loader import ThreadLoader

__all__ = ["check_plain_threadloader", "loader_settings"]

#: DataLoader arguments a ThreadLoader keeps as attributes of the same name.
_TORCH_ARGS = (
    "num_workers",
    "collate_fn",
    "pin_memory",
    "timeout",
    "worker_init_fn",
    "generator",
    "prefetch_factor",
    "persistent_workers",
    "pin_memory_device",
    "in_order",
)


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
    """The keyword arguments that build a ThreadLoader like ``loader``, less its dataset and
    how it samples and batches (``batch_size``, ``shuffle``, ``sampler``, ``batch_sampler``,
    ``drop_last``), which the caller gives."""
    out = {name: getattr(loader, name) for name in _TORCH_ARGS}
    out.update(
        item_concurrency=loader.item_concurrency,
        return_indices=loader.return_indices,
        stats=loader.keep_stats,
        on_error=loader.on_error,
        max_errors=loader.max_errors,
        max_bytes_in_flight=loader.max_bytes_in_flight,
        worker_processes=loader.worker_processes,
        process_nice=loader.process_nice,
        process_affinity=loader.process_affinity,
        # worker_method is already resolved into num_workers and worker_processes above
        worker_copy=loader.worker_copy,
        per_sample_rng=loader.per_sample_rng,
    )
    if loader.worker_processes:
        out["multiprocessing_context"] = loader.multiprocessing_context
    return out
