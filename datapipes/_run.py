"""The iterator every concurrent node returns: the consumer's handle on one epoch's run."""

from __future__ import annotations

import weakref
from typing import Protocol, TypeVar

from datapipes._lifecycle import DEFAULT_JOIN_TIMEOUT, INTERRUPT_JOIN_TIMEOUT
from datapipes.base import NodeIterator, StateDict

__all__ = ["Run", "RunIterator"]

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class Run(Protocol[T_co]):
    """One epoch of a concurrent node: its threads, queues and state. Threads reference the
    run, never the iterator, so dropping the iterator lets its finalizer stop the run."""

    def next(self) -> T_co: ...

    def state_dict(self) -> StateDict: ...

    def shutdown(self, timeout: float | None = DEFAULT_JOIN_TIMEOUT, *, warn: bool = True) -> bool: ...

    def interrupt(self) -> None: ...


class RunIterator(NodeIterator[T]):
    """Drives a :class:`Run`: ``next()`` through it, exhaustion closes it, Ctrl-C interrupts
    it (a short bound, no warning), ``close()`` and ``shutdown(timeout)`` stop it within one
    bound, and garbage collection stops it within the short bound (collection may run on any
    thread and must not wait on a stuck call)."""

    def __init__(self, run: Run[T]) -> None:
        self._run = run
        self._finalizer = weakref.finalize(self, run.shutdown, INTERRUPT_JOIN_TIMEOUT)
        self._finalizer.atexit = False  # the exit hook stops the run, within its own bound

    def __next__(self) -> T:
        try:
            return self._run.next()
        except StopIteration:
            self.close()
            raise
        except KeyboardInterrupt:
            self._run.interrupt()
            raise

    def state_dict(self) -> StateDict:
        return self._run.state_dict()

    def close(self) -> None:
        self.shutdown()

    def shutdown(self, timeout: float | None = DEFAULT_JOIN_TIMEOUT, *, warn: bool = True) -> bool:
        self._finalizer.detach()
        return self._run.shutdown(timeout, warn=warn) is not False
