"""The errors the nodes raise themselves (a user function's errors pass through as they are).

Each survives ``pickle`` and ``copy`` with its message and attributes, so it crosses a process
boundary or a ``multiprocessing`` pipe as itself; and each is built from its message alone
(``cls(message)``, its attributes then None), as torch's ``ExceptionWrapper.reraise()`` and
``multiprocessing`` rebuild an error from another worker."""

from __future__ import annotations

import reprlib
from typing import Any

__all__ = ["EpochClosedError", "NodeTimeoutError", "WorkerLostError"]

_repr = reprlib.Repr()
_repr.maxstring = 60
_repr.maxother = 60
_repr.maxlist = 8


class NodeTimeoutError(RuntimeError, TimeoutError):
    """``next()`` waited ``timeout`` seconds for item ``seq`` of the epoch.

    Both a ``RuntimeError`` (what torch's ``DataLoader`` raises on a timeout, so code that
    catches it keeps working) and a ``TimeoutError``. The item keeps its place: the next
    ``next()`` waits for it again. ``item`` is the item waited for (``None`` when unknown).
    ``NodeTimeoutError(message)`` alone keeps the message; ``node``, ``seq`` and ``timeout`` are
    then None.
    """

    def __init__(self, node: str, seq: int | None = None, item: object = None, timeout: float | None = None) -> None:
        if seq is None:  # the message alone
            self.node: str | None = None
            self.seq: int | None = None
            self.item = item
            self.timeout = timeout
            super().__init__(node)
            return
        self.node = node
        self.seq = seq
        self.item = item
        self.timeout = timeout
        super().__init__(
            f"{node}: no result for item #{seq} of this epoch ({_repr.repr(item)}) within timeout={timeout}s"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuild, (type(self), str(self), self.__dict__)


class EpochClosedError(RuntimeError):
    """The epoch was closed by another thread (``close()``, the loader's ``close()``) while
    ``next()`` waited in it: the epoch did not end, so its consumer must not take it as the end."""


class WorkerLostError(RuntimeError):
    """A worker of the epoch is gone while it held items: a worker process that was killed or
    crashed, an event-loop thread closed (or dead) under a running epoch. ``worker`` names it
    (``"worker process 1 (pid 4242, threadloader-process-1)"``, ``"threadloader-loop"``) and
    the message says how it ended and what it held. The epoch cannot be whole: its next
    ``next()`` ends it; the next epoch gets a new worker in its place. Built from its message
    alone, ``worker`` is None."""

    def __init__(self, message: str, *, worker: str | None = None) -> None:
        self.worker = worker
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuild, (type(self), str(self), self.__dict__)


def _rebuild(cls: type[BaseException], message: str, state: dict[str, Any]) -> BaseException:
    """An exception of ``cls`` built from ``message`` alone, with attributes ``state`` (for
    ``pickle`` and ``copy``: the message and every attribute as they were, whatever arguments
    built it)."""
    exc = cls(message)
    exc.__dict__.update(state)
    return exc
