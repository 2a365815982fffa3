"""Prefetcher: runs its source ahead on one thread, optionally pinning tensors."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

import torch

from datapipes._validate import check_positive_int
from datapipes.base import Node
from datapipes.thread_mapper import ThreadMapper

__all__ = ["Prefetcher", "pin_memory"]

T = TypeVar("T")


class Prefetcher(ThreadMapper[T]):
    """Pulls source items ahead of the consumer on one thread named ``Prefetcher-0``.

    Bounded: at most ``depth`` items wait for the consumer, plus one being pulled.
    Order is the source's. With ``pin_memory=True`` every tensor in each item (through
    lists, tuples, namedtuples, dicts and dataclass-free containers) is copied to pinned
    memory on that thread, so the consumer's host-to-device copy can be asynchronous; this
    needs an accelerator. Errors, close and state are as in :class:`ThreadMapper`.
    """

    def __init__(self, source: Node[T] | Iterable[T], depth: int = 2, *, pin_memory: bool = False) -> None:
        check_positive_int("depth", depth)
        super().__init__(source, _pin_memory if pin_memory else _identity, num_threads=1, max_pending=depth)
        self.depth = depth
        self.pin_memory = bool(pin_memory)


def _identity(item: T) -> T:
    return item


def pin_memory(data: Any) -> Any:
    """A copy of ``data`` with every tensor in pinned memory (containers rebuilt, others as they are)."""
    if isinstance(data, torch.Tensor):
        return data.pin_memory()
    if isinstance(data, (str, bytes)):
        return data
    if isinstance(data, Mapping):
        pinned = {k: pin_memory(v) for k, v in data.items()}
        try:
            return type(data)(pinned)  # type: ignore[call-arg]
        except TypeError:
            return pinned
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # namedtuple
        return type(data)(*(pin_memory(v) for v in data))
    if isinstance(data, Sequence):
        items = [pin_memory(v) for v in data]
        if isinstance(data, tuple):
            return tuple(items)
        try:
            return type(data)(items)  # type: ignore[call-arg]
        except TypeError:
            return items
    pin = getattr(data, "pin_memory", None)
    return pin() if callable(pin) else data


_pin_memory = pin_memory
