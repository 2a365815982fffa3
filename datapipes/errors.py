"""The errors the nodes raise themselves (a user function's errors pass through as they are)."""

from __future__ import annotations

import reprlib

__all__ = ["EpochClosedError", "NodeTimeoutError"]

_repr = reprlib.Repr()
_repr.maxstring = 60
_repr.maxother = 60
_repr.maxlist = 8


class NodeTimeoutError(RuntimeError, TimeoutError):
    """``next()`` waited ``timeout`` seconds for item ``seq`` of the epoch.

    Both a ``RuntimeError`` (what torch's ``DataLoader`` raises on a timeout, so code that
    catches it keeps working) and a ``TimeoutError``. The item keeps its place: the next
    ``next()`` waits for it again.
    """

    def __init__(self, node: str, seq: int, item: object, timeout: float | None) -> None:
        self.node = node
        self.seq = seq
        self.item = item
        self.timeout = timeout
        super().__init__(
            f"{node}: no result for item #{seq} of this epoch ({_repr.repr(item)}) within timeout={timeout}s"
        )


class EpochClosedError(RuntimeError):
    """The epoch was closed by another thread (``close()``, the loader's ``close()``) while
    ``next()`` waited in it: the epoch did not end, so its consumer must not take it as the end."""
