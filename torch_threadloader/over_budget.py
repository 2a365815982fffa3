"""The samples ``max_batch_cost`` made batches of one, each over the budget alone: a warning
once per epoch, and :class:`OverBudgetLog`, which ``loader.stats()["over_budget"]`` reads (a
worker process keeps a quiet one, drained to its parent's). A bottom module: it imports
nothing of the package but the names of the user's objects."""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Sequence
from typing import TypedDict

from torch_threadloader.userdata import Index

__all__ = ["BatchCostWarning", "OverBudgetLog", "OverBudgetRecord", "RECORDS_KEPT"]

#: The most over-budget samples whose records a loader keeps (it counts them all).
RECORDS_KEPT = 10_000


class BatchCostWarning(UserWarning):
    """A sample whose cost alone is over ``max_batch_cost`` was made a batch of one."""


class OverBudgetRecord(TypedDict):
    """One sample over the budget: its ``index``, ``cost`` and ``epoch`` (counted from 1)."""

    index: Index
    cost: int
    epoch: int


class OverBudgetLog:
    """The samples each over ``max_batch_cost`` alone, over the loader's epochs: counted, the
    newest :data:`RECORDS_KEPT` kept. Written by the thread that cuts an epoch's batches (its
    consumer, or an ``IterableDataset``'s worker threads; in worker processes, the consumer
    that takes in their records), read from any thread. ``warn=False``: a worker process's,
    which warns of nothing (its parent does) and whose records are :meth:`drain`-ed."""

    def __init__(self, *, warn: bool = True) -> None:
        self._lock = threading.Lock()
        self._warn = warn
        self._count = 0
        self._records: list[OverBudgetRecord] = []
        self._warned_epoch = 0

    def add(self, index: Index, cost: int, epoch: int, max_cost: int, *, where: str | None = None) -> None:
        """Record the sample at ``index`` (``where``: the sample in words, for the warning)."""
        self.merge([{"index": index, "cost": cost, "epoch": epoch}], epoch, max_cost, lambda _: where)

    def merge(
        self,
        records: Sequence[OverBudgetRecord],
        epoch: int,
        max_cost: int,
        where: Callable[[Index], str | None],
    ) -> None:
        """Record ``records`` as samples of ``epoch`` (a worker process's, taken in by its
        parent), all of them before the warning (which a filter may make an error);
        ``where(index)``: the sample in words, for the warning."""
        first: OverBudgetRecord | None = None
        with self._lock:
            for given in records:
                record: OverBudgetRecord = {"index": given["index"], "cost": given["cost"], "epoch": epoch}
                if self._records and self._records[-1] == record:
                    continue  # the same sample again: its warning was an error, and next() took it again
                self._count += 1
                self._records.append(record)
                if first is None and self._warn and self._warned_epoch != epoch:
                    first = record
                    self._warned_epoch = epoch
            del self._records[:-RECORDS_KEPT]
        if first is not None:  # once per epoch: stats()["over_budget"] counts and names them all
            name = where(first["index"]) or f"the sample at index {first['index']!r}"
            warnings.warn(
                f"{name} costs {first['cost']}, over max_batch_cost={max_cost}: it is a batch of one "
                "(loader.stats()['over_budget'] counts and names every such sample)",
                BatchCostWarning,
                stacklevel=3,
            )

    def drain(self) -> list[OverBudgetRecord]:
        """The records kept so far, taken out (a worker process's, sent to its parent)."""
        with self._lock:
            out, self._records = self._records, []
        return out

    def snapshot(self) -> dict[str, object]:
        with self._lock:
            return {"count": self._count, "samples": list(self._records)}
