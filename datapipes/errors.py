"""The errors the nodes raise themselves (a user function's errors pass through as they are).

Each survives ``pickle`` and ``copy`` with its attributes (``__reduce__`` gives its
constructor's arguments), so it crosses a process boundary or a ``multiprocessing`` pipe as
itself."""

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
    """

    def __init__(self, node: str, seq: int, item: object, timeout: float | None) -> None:
        self.node = node
        self.seq = seq
        self.item = item
        self.timeout = timeout
        super().__init__(
            f"{node}: no result for item #{seq} of this epoch ({_repr.repr(item)}) within timeout={timeout}s"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.node, self.seq, self.item, self.timeout), self.__dict__


class EpochClosedError(RuntimeError):
    """The epoch was closed by another thread (``close()``, the loader's ``close()``) while
    ``next()`` waited in it: the epoch did not end, so its consumer must not take it as the end."""


class WorkerLostError(RuntimeError):
    """A worker of the epoch is gone while it held items: a worker process that was killed or
    crashed, an event-loop thread closed (or dead) under a running epoch. ``worker`` names it
    (``"worker process 1 (pid 4242, threadloader-process-1)"``, ``"threadloader-loop"``) and
    the message says how it ended and what it held. The epoch cannot be whole: its next
    ``next()`` ends it; the next epoch gets a new worker in its place."""

    def __init__(self, message: str, *, worker: str) -> None:
        self.worker = worker
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuild, (type(self), str(self), self.__dict__)


def _rebuild(cls: type[BaseException], message: str, state: dict[str, Any]) -> BaseException:
    """An exception of ``cls`` with ``message`` and attributes ``state`` (for ``pickle``:
    keyword-only constructor arguments cannot travel in ``args``)."""
    exc = cls.__new__(cls)
    exc.args = (message,)
    exc.__dict__.update(state)
    return exc
