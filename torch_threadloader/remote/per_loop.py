"""One client object per event loop (an ``aiohttp.ClientSession``, an async filesystem),
made on the loop that first needs it and closed with it."""

from __future__ import annotations

import asyncio
import os
import threading
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

__all__ = ["PerLoop"]

T = TypeVar("T")

#: Every keeper task not yet done. A loop holds its tasks only weakly, so without this a
#: dataset dropped while its loop runs would let its keeper be collected while pending (its
#: session never closed). Each task removes itself when done. A forked child inherits the
#: parent's entries and never touches them (their loops do not run there).
_keepers: set[asyncio.Task[None]] = set()
_keepers_lock = threading.Lock()
#: Every PerLoop of this process, so a forked child can give each a fresh lock.
_instances: weakref.WeakSet[PerLoop[Any]] = weakref.WeakSet()


def _forget_keeper(task: asyncio.Task[None]) -> None:
    with _keepers_lock:
        _keepers.discard(task)


def _after_fork_in_child() -> None:
    """New locks in a forked child: a thread of the parent may have held one at the fork,
    and that thread does not exist here to release it."""
    global _keepers_lock
    _keepers_lock = threading.Lock()
    for per_loop in list(_instances):
        per_loop._lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


class PerLoop(Generic[T]):
    """The running loop's object, made by ``make()`` the first time that loop asks (so on the
    loader's loop when a ThreadLoader runs the dataset, on a private loop for ``sync()``).

    Ownership: each object is held by a *keeper* task on its loop (itself held in a
    module-level set until it is done) that awaits ``close(obj)`` when cancelled: by
    :meth:`aclose` (awaited on that loop), or when the loop winds down cancelling its tasks
    (``EventLoopThread.close()``, ``asyncio.run``). A loop closed without cancelling its tasks
    leaves its object unclosed. In a forked child the parent's objects are kept referenced
    and never touched (closing them there would close sockets the parent still uses); new
    ones are made. Thread-safe; fork-safe (the locks are made anew in a child)."""

    def __init__(self, make: Callable[[], T], close: Callable[[T], Awaitable[object]]) -> None:
        self._make = make
        self._close = close
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._objects: dict[asyncio.AbstractEventLoop, tuple[T, asyncio.Task[None]]] = {}
        self._stale: list[dict[asyncio.AbstractEventLoop, tuple[T, asyncio.Task[None]]]] = []
        _instances.add(self)

    def _current(self) -> dict[asyncio.AbstractEventLoop, tuple[T, asyncio.Task[None]]]:
        """This process's objects (call holding the lock)."""
        if self._pid != os.getpid():  # a forked child: the parent's objects stay referenced, untouched
            self._stale.append(self._objects)
            self._objects, self._pid = {}, os.getpid()
        return self._objects

    def get(self) -> T:
        """The running loop's object, made now if it has none. Call on a running loop."""
        loop = asyncio.get_running_loop()
        with self._lock:
            entry = self._current().get(loop)
        if entry is not None and not entry[1].done():
            return entry[0]
        obj = self._make()  # only this loop's thread gets here for this loop
        keeper = loop.create_task(self._keep(loop, obj), name="threadloader-remote-client")
        with _keepers_lock:
            _keepers.add(keeper)
        keeper.add_done_callback(_forget_keeper)
        with self._lock:
            self._current()[loop] = (obj, keeper)
        return obj

    async def _keep(self, loop: asyncio.AbstractEventLoop, obj: T) -> None:
        try:
            await asyncio.Event().wait()  # until cancelled
        finally:
            with self._lock:
                objects = self._current()
                entry = objects.get(loop)
                if entry is not None and entry[0] is obj:
                    del objects[loop]
            await self._close(obj)

    async def aclose(self) -> None:
        """Close the running loop's object (if any) and wait until it is closed; idempotent."""
        loop = asyncio.get_running_loop()
        with self._lock:
            entry = self._current().get(loop)
        if entry is None:
            return
        entry[1].cancel()
        await asyncio.gather(entry[1], return_exceptions=True)
