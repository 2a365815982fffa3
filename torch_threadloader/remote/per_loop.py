"""One client object per event loop (an ``aiohttp.ClientSession``, an async filesystem),
made on the loop that first needs it and closed with it."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

__all__ = ["PerLoop"]

T = TypeVar("T")


class PerLoop(Generic[T]):
    """The running loop's object, made by ``make()`` the first time that loop asks (so on the
    loader's loop when a ThreadLoader runs the dataset, on a private loop for ``sync()``).

    Ownership: each object is held by a *keeper* task on its loop that awaits
    ``close(obj)`` when cancelled: by :meth:`aclose` (awaited on that loop), or when the loop
    winds down cancelling its tasks (``EventLoopThread.close()``, ``asyncio.run``), with no
    registration anywhere. In a forked child the parent's objects are forgotten (their loops
    do not run there) and new ones are made. Thread-safe."""

    def __init__(self, make: Callable[[], T], close: Callable[[T], Awaitable[object]]) -> None:
        self._make = make
        self._close = close
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._objects: dict[asyncio.AbstractEventLoop, tuple[T, asyncio.Task[None]]] = {}

    def get(self) -> T:
        """The running loop's object, made now if it has none. Call on a running loop."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._pid != os.getpid():
                self._objects, self._pid = {}, os.getpid()
            entry = self._objects.get(loop)
        if entry is not None and not entry[1].done():
            return entry[0]
        obj = self._make()  # only this loop's thread gets here for this loop
        keeper = loop.create_task(self._keep(loop, obj), name="threadloader-remote-client")
        with self._lock:
            self._objects[loop] = (obj, keeper)
        return obj

    async def _keep(self, loop: asyncio.AbstractEventLoop, obj: T) -> None:
        try:
            await asyncio.Event().wait()  # until cancelled
        finally:
            with self._lock:
                entry = self._objects.get(loop)
                if entry is not None and entry[0] is obj:
                    del self._objects[loop]
            await self._close(obj)

    async def aclose(self) -> None:
        """Close the running loop's object (if any) and wait until it is closed; idempotent."""
        loop = asyncio.get_running_loop()
        with self._lock:
            entry = self._objects.get(loop) if self._pid == os.getpid() else None
        if entry is None:
            return
        entry[1].cancel()
        await asyncio.gather(entry[1], return_exceptions=True)

    def open_count(self) -> int:
        """How many loops hold an object now."""
        with self._lock:
            return len(self._objects) if self._pid == os.getpid() else 0
