"""A ``collate_fn`` that writes each batch into a reused, preallocated (optionally pinned) tensor.

``default_collate`` stacks a batch of images into a fresh tensor (19 MiB for 32 float images
of 3x224x224): glibc hands such blocks back to the kernel when they are freed and faults them in
again for the next batch, which is where CPU-bound image loading loses time
(``docs/performance.md``). :class:`BufferedCollate` keeps a small pool of batch tensors and
stacks into one that nothing references any more.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data._utils.collate import collate, collate_tensor_fn, default_collate_fn_map

__all__ = ["BufferStats", "BufferedCollate"]

_Key = tuple[tuple[int, ...], torch.dtype]


def _storage_use_count(tensor: torch.Tensor) -> int:
    # How many owners the tensor's storage has: every tensor (view, alias, pinned tensor that
    # is the same tensor), NumPy array or storage object made from it holds one. torch has no
    # public API for it; this is the function torch's own tests use.
    return int(torch._C._storage_Use_Count(tensor.untyped_storage()._cdata))


def _collate_tensor_fn(batch: list[torch.Tensor]) -> torch.Tensor:
    out: torch.Tensor = collate_tensor_fn(batch)
    return out


@dataclass(frozen=True)
class BufferStats:
    """Counters of a :class:`BufferedCollate` since it was made: ``allocations`` (buffers
    allocated, ``pinned`` of them in pinned memory), ``reuses`` (batches written into a
    buffer allocated earlier), ``unretained`` (batches that found every retained buffer in use
    and the pool full, so got a buffer the pool does not keep), ``retained`` (buffers held now)."""

    allocations: int
    pinned: int
    reuses: int
    unretained: int
    retained: int


@dataclass
class _Buffer:
    tensor: torch.Tensor
    idle_count: int  # the storage's use count when nothing outside the pool holds it


class BufferedCollate:
    """``default_collate``'s values and structure (tuples, lists, dicts, namedtuples of tensors,
    numbers, strings), with every batch of same-shape, same-dtype CPU tensors stacked into a
    ``[B, *shape]`` buffer from a pool instead of a fresh tensor.

    A buffer is reused only when nothing outside the pool references its memory any more: not
    the batch, nor a view, slice, NumPy array or pinned alias of it (torch's storage use count).
    A consumer that keeps batches therefore keeps correct data; the pool allocates another
    buffer instead. The pool retains at most ``capacity`` buffers in all (for ``num_workers``
    workers and ``prefetch_factor``, about ``num_workers * prefetch_factor + 3`` are in use at
    once: the batches loading or waiting, the one the consumer holds, the previous one until the
    loop variable moves on, and a short last batch); past that, a free buffer of another shape
    is dropped, or, when none is free, the batch gets a buffer the pool does not keep.

    ``pin_memory=True`` allocates buffers in pinned memory when an accelerator is available
    (``torch.accelerator.is_available()``), once per buffer; the loader's own pinning then
    finds them pinned and copies nothing. Without an accelerator it allocates ordinary memory.

    Thread-safe: the loader's worker threads may call it at once (the pool is under a lock).
    Tensors that are not CPU, strided, of one shape and dtype go to torch's ``collate_tensor_fn``
    (its results and errors).
    """

    def __init__(self, *, capacity: int = 8, pin_memory: bool = False) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"capacity must be an int >= 1, got {capacity!r}")
        self.capacity = capacity
        self.pin_memory = pin_memory
        self._lock = threading.Lock()
        self._pool: dict[_Key, list[_Buffer]] = {}
        self._allocations = 0
        self._pinned = 0
        self._reuses = 0
        self._unretained = 0
        self._fn_map: dict[type | tuple[type, ...], Callable[..., Any]] = {
            **default_collate_fn_map,
            torch.Tensor: self._collate_tensors,
        }

    def __repr__(self) -> str:
        return f"BufferedCollate(capacity={self.capacity}, pin_memory={self.pin_memory})"

    def __call__(self, batch: list[Any]) -> Any:
        return collate(batch, collate_fn_map=self._fn_map)

    def stats(self) -> BufferStats:
        """The counters now."""
        with self._lock:
            retained = sum(len(buffers) for buffers in self._pool.values())
            return BufferStats(self._allocations, self._pinned, self._reuses, self._unretained, retained)

    def clear(self) -> None:
        """Drop every retained buffer (batches handed out keep their memory)."""
        with self._lock:
            self._pool.clear()

    def __getstate__(self) -> dict[str, Any]:
        # Copies (pickling, deepcopy) start with an empty pool of their own.
        return {"capacity": self.capacity, "pin_memory": self.pin_memory}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    def _collate_tensors(
        self,
        batch: list[torch.Tensor],
        *,
        collate_fn_map: dict[type | tuple[type, ...], Callable[..., Any]] | None = None,
    ) -> torch.Tensor:
        first = batch[0]
        shape, dtype = first.shape, first.dtype
        if first.device.type != "cpu" or first.layout != torch.strided or first.is_nested:
            return _collate_tensor_fn(batch)
        for tensor in batch:
            if type(tensor) is not type(first) or tensor.shape != shape or tensor.dtype != dtype:
                return _collate_tensor_fn(batch)  # torch's result (or error) for mixed batches
        out = self._acquire((len(batch), *shape), dtype)
        torch.stack(batch, 0, out=out)
        return out

    def _acquire(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """A tensor of ``shape`` and ``dtype`` whose memory nothing else references; the alias
        handed out is made under the lock, so no other thread can take the same buffer."""
        key: _Key = (shape, dtype)
        with self._lock:
            buffers = self._pool.setdefault(key, [])
            for buffer in buffers:
                if _storage_use_count(buffer.tensor) == buffer.idle_count:
                    self._reuses += 1
                    return buffer.tensor.detach()
            retained = sum(len(b) for b in self._pool.values())
            if retained >= self.capacity and not self._evict_idle(key):
                self._unretained += 1
                return self._allocate(shape, dtype)
            tensor = self._allocate(shape, dtype)
            buffers.append(_Buffer(tensor, _storage_use_count(tensor)))
            return tensor.detach()

    def _evict_idle(self, keep: _Key) -> bool:
        for key, buffers in self._pool.items():
            if key == keep:
                continue
            for i, buffer in enumerate(buffers):
                if _storage_use_count(buffer.tensor) == buffer.idle_count:
                    del buffers[i]
                    if not buffers:
                        del self._pool[key]
                    return True
        return False

    def _allocate(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        pin = self.pin_memory and torch.accelerator.is_available()
        self._allocations += 1
        self._pinned += pin
        return torch.empty(shape, dtype=dtype, pin_memory=pin)
