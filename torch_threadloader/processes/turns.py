"""The parent's books of one epoch over worker processes: the map-style batches sent (their
numbers in the epoch and in each child's share), and for an ``IterableDataset`` how a resumed
epoch's state is split between the children and whose batch comes next in order."""

from __future__ import annotations

import dataclasses
from collections import deque
from typing import Any

from torch_threadloader.processes.messages import BatchDone, BatchFailed

__all__ = ["Result", "Sent", "Turns", "child_resumes"]


@dataclasses.dataclass(frozen=True, slots=True)
class Result:
    """A batch (or its error) received from child ``child``, waiting to be handed out: ``key``
    is its number in the epoch (map-style, async) or its tag (``IterableDataset``)."""

    message: BatchDone | BatchFailed
    key: Any
    child: int


class Sent:
    """Map-style: the batches sent this epoch, numbered ``j`` in the order sent, each also
    numbered ``k`` in its child's share (the child tags its results with ``k``); kept until
    handed out. Owned by the epoch's consumer thread."""

    def __init__(self, processes: int) -> None:
        self.count = 0  # batches sent (the next j)
        self.items: dict[int, tuple[int, Any]] = {}  # j -> (position, indices), until handed out
        self._local: list[dict[int, int]] = [{} for _ in range(processes)]  # per child: k -> j
        self._next_local = [0] * processes

    def add(self, c: int, position: int, indices: Any) -> None:
        """The batch at ``position`` is sent to child ``c``."""
        j = self.count
        self.count += 1
        self.items[j] = (position, indices)
        k = self._next_local[c]
        self._next_local[c] = k + 1
        self._local[c][k] = j

    def received(self, c: int, tag: Any) -> tuple[int, int]:
        """``(j, k)`` of child ``c``'s result tagged ``tag`` (untagged: its oldest, in order)."""
        local = self._local[c]
        k = tag if isinstance(tag, int) and tag in local else min(local)
        return local.pop(k), k

    def of_local(self, c: int, k: Any) -> int | None:
        """``j`` of child ``c``'s batch ``k`` while it is out, else None."""
        return self._local[c].get(k)

    def oldest_out(self, c: int) -> int | None:
        """``j`` of child ``c``'s oldest batch not yet received."""
        return min(self._local[c].values(), default=None)


def child_resumes(
    resume: dict[str, Any] | None, processes: int, threads: int, total: int
) -> tuple[int, list[dict[str, Any] | None]]:
    """``(turn, parts)``: whose turn is first (a worker of all ``total``), and each child's part
    of ``resume`` (its workers' states, and which of its threads goes first), or ``None`` each
    for an epoch from the start. Worker ``w`` is thread ``w // P`` of child ``w % P``."""
    turn = int(resume["turn"]) if resume is not None else 0
    parts: list[dict[str, Any] | None] = []
    for c in range(processes):
        first = turn + ((c - turn) % processes)  # child c's first worker from the turn on
        if first >= total:
            first -= total
        if resume is None:
            parts.append(None)
            continue
        workers = resume["workers"]
        parts.append({"workers": [workers[t * processes + c] for t in range(threads)], "turn": first // processes})
    return turn, parts


class Turns:
    """``IterableDataset``, in order: the next batch of the next worker still active, round
    robin over all ``P * n`` workers, as in one process. A process's batches come in its own
    round-robin order, so when its next batch is not from the worker whose turn it is, that
    worker's share has ended (in one process the same turn is passed over). Owned by the
    epoch's consumer thread."""

    def __init__(self, processes: int, total: int, turn: int) -> None:
        self._p = processes
        self.turn = turn
        self.active = [True] * total

    def take(self, fifo: list[deque[Result]], ended: list[bool]) -> tuple[Result | None, int | None]:
        """``(result, None)``, or ``(None, c)`` when the turn waits on child ``c``'s next batch,
        or ``(None, None)`` when no worker is active."""
        p, active = self._p, self.active
        total = len(active)
        for _ in range(total):
            w = self.turn
            c, t = w % p, w // p
            queue = fifo[c]
            if active[w] and queue:
                tag = queue[0].key
                if tag is None or int(tag[0]) == t:
                    self.turn = (w + 1) % total
                    return queue.popleft(), None
                active[w] = False
            elif active[w] and ended[c]:
                active[w] = False
            elif active[w]:
                return None, c
            self.turn = (w + 1) % total
        return None, None
