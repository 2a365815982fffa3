"""The samples ``max_batch_cost`` made batches of one, each over the budget alone: a warning
once per epoch, and :class:`OverBudgetLog`, which ``loader.stats()["over_budget"]`` reads. A
bottom module: it imports nothing of the package but the names of the user's objects."""

from __future__ import annotations

import threading
import warnings
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
    newest :data:`RECORDS_KEPT` kept. Written by the thread that cuts an epoch's batches (its consumer, or an
    ``IterableDataset``'s worker threads), read from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = 0
        self._records: list[OverBudgetRecord] = []
        self._warned_epoch = 0

    def add(self, index: Index, cost: int, epoch: int, max_cost: int, *, where: str | None = None) -> None:
        """Record the sample at ``index`` (``where``: the sample in words, for the warning)."""
        with self._lock:
            if self._records and self._records[-1] == {"index": index, "cost": cost, "epoch": epoch}:
                return  # the same sample again: its warning was an error, and next() took it again
            self._count += 1
            self._records.append({"index": index, "cost": cost, "epoch": epoch})
            del self._records[:-RECORDS_KEPT]
            first = self._warned_epoch != epoch
            self._warned_epoch = epoch
        if first:  # once per epoch: stats()["over_budget"] counts and names them all
            warnings.warn(
                f"{where or f'the sample at index {index!r}'} costs {cost}, over max_batch_cost={max_cost}: it is a "
                "batch of one "
                "(loader.stats()['over_budget'] counts and names every such sample)",
                BatchCostWarning,
                stacklevel=2,
            )

    def snapshot(self) -> dict[str, object]:
        with self._lock:
            return {"count": self._count, "samples": list(self._records)}
