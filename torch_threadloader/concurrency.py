"""How many requests a ThreadLoader keeps in flight for an async dataset, and a warning
when a setting asks for more than that."""

from __future__ import annotations

import threading
import warnings

__all__ = [
    "in_flight",
    "warn_if_unreachable",
]

_warned: set[tuple[int | None, int, int]] = set()
_lock = threading.Lock()


def in_flight(batch_size: int | None, num_workers: int, item_concurrency: int) -> int:
    """The most items of an async dataset ThreadLoader has in flight: each of
    ``max(num_workers, 1)`` batches loads at once, and a batch has at most
    ``min(item_concurrency, batch_size)`` of its items in flight (one item without batching)."""
    per_batch = 1 if batch_size is None else min(item_concurrency, batch_size)
    return max(num_workers, 1) * per_batch


def warn_if_unreachable(
    batch_size: int | None, num_workers: int, item_concurrency: int, *, stacklevel: int = 2
) -> bool:
    """Warn (once per setting and process) when ``item_concurrency`` is larger than a batch,
    so part of it can never be used; say the setting that reaches the same number. Returns
    whether it warned."""
    per_batch = 1 if batch_size is None else batch_size
    if item_concurrency <= per_batch:
        return False
    key = (batch_size, num_workers, item_concurrency)
    with _lock:
        if key in _warned:
            return False
        _warned.add(key)
    reached = in_flight(batch_size, num_workers, item_concurrency)
    asked = max(num_workers, 1) * item_concurrency
    workers = -(-asked // per_batch)
    warnings.warn(
        f"item_concurrency={item_concurrency} with batches of {batch_size} and num_workers={num_workers} keeps "
        f"at most {reached} items in flight, not {asked}: a batch never has more than its {per_batch} items "
        f"in flight, and each worker loads one batch at a time. For {asked} in flight use "
        f"num_workers={workers}, item_concurrency={per_batch}.",
        RuntimeWarning,
        stacklevel=stacklevel,
    )
    return True


def _forget_warnings() -> None:
    """Forget which settings :func:`warn_if_unreachable` already warned about (a test hook:
    each test then sees the first warning of its own)."""
    with _lock:
        _warned.clear()
