"""The process transport of one epoch: the loader's process's channels to its worker
processes. It moves messages only (send to a child, wait for what the children sent or for one
lost, wake a waiting ``wait``); the epoch (``epoch.py``) owns the contract: order, the bound on
what is sent ahead, timeout, close, the lost-worker error, state."""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
from typing import Any

import datapipes as dp
from torch_threadloader.processes.messages import ToChild, ToParent, WorkerLost
from torch_threadloader.processes.pool import ChildHandle

__all__ = ["CLOSED", "ProcessTransport", "Received"]

#: ``ProcessTransport.wait``'s answer when :meth:`ProcessTransport.wake` woke it (a close).
CLOSED = "closed"
#: A message of child ``c`` (or the news that it was lost), as ``(c, message)``.
Received = tuple[int, ToParent | WorkerLost]


class ProcessTransport:
    """The pipes of ``children`` and a wake pipe. ``send`` and ``wake`` may come from any
    thread (a child's ``send`` is locked); ``wait`` and ``wait_ends`` from the epoch's
    consumer thread only, which also owns ``lost``."""

    def __init__(self, children: list[ChildHandle]) -> None:
        self.children = children
        self.lost = [False] * len(children)  # a WorkerLost was reported for the child
        self._wake_r, self._wake_w = multiprocessing.Pipe(duplex=False)

    def send(self, c: int, message: ToChild) -> bool:
        """``message`` to child ``c``; False when it is gone (then :meth:`lose` reports it)."""
        return self.children[c].send(message)

    def lose(self, c: int) -> WorkerLost:
        """The news that child ``c`` is lost, how it ended in words (once per child)."""
        self.lost[c] = True
        return WorkerLost(c, self.children[c].death())

    def wake(self) -> None:
        """Make a waiting (or the next) :meth:`wait` answer :data:`CLOSED`."""
        try:
            self._wake_w.send_bytes(b"")
        except OSError:
            pass

    def wait(self, deadline: dp.Deadline | None) -> list[Received] | str:
        """What the children sent, in the order each sent it, a lost child after what it sent
        before it ended; ``[]`` at the deadline, :data:`CLOSED` when woken."""
        waits: list[Any] = [self._wake_r]
        for c, child in enumerate(self.children):
            if not self.lost[c]:
                waits += [child.outbox, child.process.sentinel]
        ready = multiprocessing.connection.wait(waits, None if deadline is None else deadline.remaining())
        if self._wake_r in ready:
            return CLOSED
        out: list[Received] = []
        for c, child in enumerate(self.children):
            if self.lost[c]:
                continue
            pipe_open = self._drain(c, out) if child.outbox in ready else True
            if not pipe_open or child.process.sentinel in ready:
                # It ended: what it sent before is still in the pipe, and is handed out first.
                self._drain(c, out)
                out.append((c, self.lose(c)))
        return out

    def wait_ends(self, pending: list[int], deadline: dp.Deadline) -> tuple[list[Received], list[int]]:
        """One wait, until ``deadline``, for the children ``pending``: what they sent, and those
        whose pipe ended."""
        out: list[Received] = []
        closed: list[int] = []
        ready = multiprocessing.connection.wait([self.children[c].outbox for c in pending], deadline.remaining())
        for c in pending:
            if self.children[c].outbox in ready and not self._drain(c, out):
                closed.append(c)
        return out, closed

    def _drain(self, c: int, out: list[Received]) -> bool:
        """Every message child ``c`` has sent, onto ``out``; False when its pipe ended."""
        conn = self.children[c].outbox
        try:
            while conn.poll():
                out.append((c, conn.recv()))
        except (EOFError, OSError):
            return False
        return True
