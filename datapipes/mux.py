"""Mux: interleaves several nodes, one item from each in turn."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

from datapipes._lifecycle import DEFAULT_JOIN_TIMEOUT, Deadline
from datapipes.base import Node, NodeIterator, StateDict, as_node

__all__ = ["Mux"]

T = TypeVar("T")


class Mux(Node[T]):
    """Yields one item from each source in turn, dropping sources as they end; the epoch ends
    when every source has. This is the order in which torch's ``DataLoader`` returns the
    batches of its ``IterableDataset`` workers.

    Works in the consumer's thread (each source brings its own concurrency) and holds
    nothing. An exception from a source is raised at its turn, and the next ``next()`` goes
    on with the following source. Closing closes every source. State: each source's state
    and whose turn it is.
    """

    def __init__(self, sources: Sequence[Node[T] | Iterable[T]], *, name: str | None = None) -> None:
        super().__init__(None, name=name)
        if not sources:
            raise ValueError("Mux needs at least one source")
        self.sources = [as_node(s) for s in sources]

    def _open(self, state: StateDict | None) -> NodeIterator[T]:
        return _MuxIterator(self, state)

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = self.node_stats().as_dict()
        out["sources"] = [s.stats() for s in self.sources]
        return out

    def __repr__(self) -> str:
        return f"{self.name}({', '.join(repr(s) for s in self.sources)})"


class _MuxIterator(NodeIterator[T]):
    def __init__(self, node: Mux[T], state: StateDict | None) -> None:
        self._stats = node._stats
        states = state["sources"] if state else [None] * len(node.sources)
        self._iterators: list[NodeIterator[T]] = []
        try:
            for source, sub in zip(node.sources, states, strict=True):
                self._iterators.append(source._open(sub))
        except BaseException:
            self.close()
            raise
        self._active: list[bool] = list(state["active"]) if state else [True] * len(self._iterators)
        self._turn = int(state["turn"]) if state else 0
        try:
            for i, active in enumerate(self._active):
                if not active:
                    self._run_out(i)
        except BaseException:
            self.close()
            raise

    def _run_out(self, i: int) -> None:
        """Pull ended source ``i`` to its end again, as the run this one resumes did (a source
        may draw when its end is reached, as torch's ``RandomSampler`` does)."""
        it = self._iterators[i]
        while True:
            try:
                next(it)
            except StopIteration:
                return
            except Exception:  # the run resumed delivered it (at that source's turn) and went on
                continue
            raise RuntimeError(
                f"Mux source {i} yielded an item after the state that says it ended: it does not resume exactly"
            )

    def __next__(self) -> T:
        iterators, active = self._iterators, self._active
        n = len(iterators)
        while any(active):
            i = self._turn
            if not active[i]:
                self._turn = (i + 1) % n
                continue
            try:
                item = next(iterators[i])
            except StopIteration:
                active[i] = False
                continue
            except BaseException:
                self._turn = (i + 1) % n
                raise
            self._turn = (i + 1) % n
            self._stats.add(items_in=1, items_out=1)
            return item
        raise StopIteration

    def state_dict(self) -> StateDict:
        return {
            "sources": [it.state_dict() for it in self._iterators],
            "active": list(self._active),
            "turn": self._turn,
        }

    def close(self) -> None:
        self.shutdown()

    def shutdown(self, timeout: float | None = DEFAULT_JOIN_TIMEOUT, *, warn: bool = True) -> bool:
        deadline = Deadline(timeout)
        stopped = True
        for it in self._iterators:
            stopped = it.shutdown(deadline.remaining(), warn=warn) and stopped
        self._active = [False] * len(self._iterators)
        return stopped
