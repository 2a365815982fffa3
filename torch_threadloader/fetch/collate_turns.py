"""CollateTurns: each worker's batches collated in the order torch's worker would collate them,
while several of its batches load at once."""

from __future__ import annotations

import asyncio

__all__ = ["CollateTurns"]


class CollateTurns:
    """Worker ``w``'s batches of an async epoch are collated one after another in the epoch's
    order (as torch's worker loads and collates its batches one at a time), so a ``collate_fn``
    that draws from the worker's random state draws in the same order whichever batch's items
    finish first. Batches still load at once; only their collation waits.

    :meth:`take` is called as a batch starts (in the epoch's order, on the loop's thread, before
    its first ``await``) and gives the batch's turn; loop thread only.
    """

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: dict[int, asyncio.Future[None]] = {}  # worker -> its latest batch's turn

    def take(self, worker: int) -> _Turn:
        """The turn of the batch that ``worker`` starts now: after the one it started before."""
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        before = self._last.get(worker)
        self._last[worker] = mine
        return _Turn(before, mine)


class _Turn:
    __slots__ = ("_before", "_mine")

    def __init__(self, before: asyncio.Future[None] | None, mine: asyncio.Future[None]) -> None:
        self._before = before
        self._mine = mine

    async def wait(self) -> None:
        """Until the worker's batch before this one was collated (or failed, or was cancelled)."""
        if self._before is not None and not self._before.done():
            await asyncio.shield(self._before)

    def done(self) -> None:
        """This batch's collation is over (however it ended): the next one may go."""
        if not self._mine.done():
            self._mine.set_result(None)
