"""Ray Data: :class:`RayDataSource`, a ``datapipes`` source node over a Ray Dataset or ``DataIterator``.

The scale-out path: Ray's streaming executor reads and preprocesses across the cluster and
hands this process its shard (``ray.train.get_dataset_shard("train")`` in a Ray Train
worker, or any ``ray.data.Dataset``/``DataIterator``); the node yields its rows one by one, so
a graph after it (``.map(f, num_threads=8).batch(64).collate()``, or a ThreadLoader over the
graph) does the per-sample last mile on this process's threads, with stats, pinning and
exact order.

Bounds: the node holds one Ray batch (``batch_size`` rows) and Ray's iterator prefetches
``prefetch_batches`` more (Ray's own bound, and its executor's object-store budget upstream).
Close: ``close()``, ``break`` (the epoch dropped) or the end of the stream closes Ray's
iterator, which stops its executor and iteration threads; Ray 2.60's block prefetcher thread
(``Prefetcher``) stops at the end of the stream only (docs/frameworks.md, "Close"). Errors: an exception Ray raises (a task's
error re-raised in this process) comes out of ``next()`` with a note naming the node and
the row; Ray's iterator cannot go on after it, so the epoch ends there.

Resume: Ray's iterators have no state (ray-project/ray#37633). The node's state is the
number of rows it delivered this epoch; resuming iterates the source again and drops that
many rows (whole Ray batches are dropped without being unbatched). That is exact when the
execution is deterministic: the same rows in the same order each time the source is
iterated, which needs ``DataContext.get_current().execution_options.preserve_order = True``
and deterministic transforms (a ``random_shuffle`` with a fixed ``seed``); without it a resume
delivers the right number of rows, not the same ones. The dropped rows are still read and
preprocessed by Ray: the cost of a resume is the epoch so far.

Importing this module does not import Ray; the node only calls ``iter_batches`` on its source.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import datapipes as dp
from datapipes.base import NodeIterator, StateDict, add_item_note

__all__ = ["RayDataSource"]


class RayDataSource(dp.Node[dict[str, Any]]):
    """Yields the rows of ``source`` (a ``ray.data.Dataset`` or ``ray.data.DataIterator``) as
    dicts of column -> value (NumPy scalars or arrays); each epoch iterates ``source`` (kept as
    ``dataset``) again.

    ``batch_size`` rows are taken from Ray at a time (``iter_batches(batch_size=...,
    batch_format="numpy")``) and ``prefetch_batches`` more are prefetched by Ray. See the
    module's docstring for bounds, close, errors and what resume means.
    """

    def __init__(
        self, source: Any, *, batch_size: int = 256, prefetch_batches: int = 1, name: str | None = None
    ) -> None:
        if not callable(getattr(source, "iter_batches", None)):
            raise TypeError(
                f"source must be a ray.data.Dataset or ray.data.DataIterator (with iter_batches), got {type(source).__name__}"
            )
        for arg, value, low in (("batch_size", batch_size, 1), ("prefetch_batches", prefetch_batches, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{arg} must be an int >= {low}, got {value!r}")
        super().__init__(None, name=name)
        self.dataset = source
        self.batch_size = batch_size
        self.prefetch_batches = prefetch_batches

    def _open(self, state: StateDict | None) -> NodeIterator[dict[str, Any]]:
        return _RayRows(self, 0 if state is None else int(state.get("rows", 0)))

    def __repr__(self) -> str:
        return f"{self.name}({type(self.dataset).__name__}, batch_size={self.batch_size})"


class _RayRows(NodeIterator[dict[str, Any]]):
    def __init__(self, node: RayDataSource, skip: int) -> None:
        self._node = node
        self._stats = node._stats
        self._batches: Iterator[Mapping[str, Any]] | None = iter(
            node.dataset.iter_batches(
                batch_size=node.batch_size, batch_format="numpy", prefetch_batches=node.prefetch_batches
            )
        )
        self._rows = 0  # delivered this epoch (the resumed part included)
        self._batch: Mapping[str, Any] | None = None
        self._at = 0
        self._len = 0
        self._skip(skip)

    def _skip(self, rows: int) -> None:
        """Drop ``rows`` rows: whole Ray batches as they come, then the start of one."""
        while rows > 0 and self._fill():
            take = min(rows, self._len - self._at)
            self._at += take
            self._rows += take
            rows -= take

    def _fill(self) -> bool:
        """A batch with rows left in hand; False at the end of the stream."""
        while self._batch is None or self._at >= self._len:
            batches = self._batches
            if batches is None:
                return False
            try:
                batch = next(batches)
            except StopIteration:
                self.close()
                return False
            except Exception as exc:
                add_item_note(exc, self._node.name, self._rows, "(a Ray batch)")
                self._stats.add(errors=1)
                self.close()  # Ray's iterator cannot go on after an error
                raise
            self._batch, self._at = batch, 0
            self._len = len(next(iter(batch.values()))) if batch else 0
        return True

    def __next__(self) -> dict[str, Any]:
        if not self._fill():
            raise StopIteration
        batch, at = self._batch, self._at
        assert batch is not None
        row = {column: values[at] for column, values in batch.items()}
        self._at += 1
        self._rows += 1
        self._stats.add(items_in=1, items_out=1)
        return row

    def state_dict(self) -> StateDict:
        return {"rows": self._rows}

    def close(self) -> None:
        """Close Ray's iterator (it stops its executor and iteration threads); idempotent."""
        batches, self._batches = self._batches, None
        self._batch = None
        close = getattr(batches, "close", None)
        if close is not None:
            close()
