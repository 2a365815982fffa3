"""How many requests a ThreadLoader keeps in flight, and a warning when a setting asks for more
than that."""

from __future__ import annotations

import threading
import warnings

__all__ = [
    "async_prefetch",
    "in_flight",
    "warn_if_unreachable",
]

_warned: set[tuple[int | None, int, int, int | None]] = set()
_lock = threading.Lock()


def async_prefetch(prefetch_factor: int | None, batch_size: int | None, item_concurrency: int) -> int:
    """Batches per worker an async dataset's epoch may have loading or ready: ``prefetch_factor``,
    or when it is None (without workers, where torch refuses one; with workers torch makes it 2)
    two for each batch's worth of ``item_concurrency`` (at least 2): while the earliest batch
    waits for its last items, the next ones' items take the slots it frees."""
    if prefetch_factor is not None:
        return prefetch_factor
    return 2 * max(1, -(-item_concurrency // (1 if batch_size is None else batch_size)))


def in_flight(
    batch_size: int | None, num_workers: int, item_concurrency: int, *, prefetch_factor: int | None = None
) -> int:
    """The most items ThreadLoader has in flight at once.

    Items as the unit (``prefetch_factor`` given: an async dataset, as :func:`async_prefetch`
    makes it, or worker threads loading by ``__getitem__``): ``max(num_workers, 1) *
    item_concurrency`` items shared by every batch loading, and at most ``max(num_workers, 1) *
    prefetch_factor`` batches load or wait, so ``max(num_workers, 1) * min(item_concurrency,
    prefetch_factor * batch_size)``. Else (``prefetch_factor`` not given: no workers, or a byte
    budget): each of ``max(num_workers, 1)`` workers loads one batch at a time,
    ``min(item_concurrency, batch_size)`` of its items at once. One item per batch without
    batching (``batch_size=None``)."""
    per_batch = 1 if batch_size is None else batch_size
    if prefetch_factor is None:
        return max(num_workers, 1) * min(item_concurrency, per_batch)
    return max(num_workers, 1) * min(item_concurrency, prefetch_factor * per_batch)


def warn_if_unreachable(
    batch_size: int | None,
    num_workers: int,
    item_concurrency: int,
    *,
    prefetch_factor: int | None = None,
    stacklevel: int = 2,
) -> bool:
    """Warn (once per setting and process) when ``item_concurrency`` asks for more items in
    flight than :func:`in_flight` allows, and say the setting that reaches it. Returns
    whether it warned (never for a ``prefetch_factor`` below 1, which ``iter()`` refuses as
    torch does)."""
    if prefetch_factor is not None and prefetch_factor < 1:
        return False
    reached = in_flight(batch_size, num_workers, item_concurrency, prefetch_factor=prefetch_factor)
    asked = max(num_workers, 1) * item_concurrency
    if reached >= asked:
        return False
    key = (batch_size, num_workers, item_concurrency, prefetch_factor)
    with _lock:
        if key in _warned:
            return False
        _warned.add(key)
    per_batch = 1 if batch_size is None else batch_size
    if prefetch_factor is None:
        why = f"a batch never has more than its {per_batch} items in flight, and each worker loads one batch at a time"
        fix = f"num_workers={-(-asked // per_batch)}, item_concurrency={per_batch}"
    else:
        batches = max(num_workers, 1) * prefetch_factor
        why = f"at most {batches} batches of {per_batch} load at once (num_workers x prefetch_factor)"
        fix = f"prefetch_factor={-(-item_concurrency // per_batch)}"
    warnings.warn(
        f"item_concurrency={item_concurrency} with batches of {batch_size} and num_workers={num_workers} keeps "
        f"at most {reached} items in flight, not {asked}: {why}. For {asked} in flight use {fix}.",
        RuntimeWarning,
        stacklevel=stacklevel,
    )
    return True


def _forget_warnings() -> None:
    """Forget which settings :func:`warn_if_unreachable` already warned about (a test hook:
    each test then sees the first warning of its own)."""
    with _lock:
        _warned.clear()
