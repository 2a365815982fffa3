"""The messages between the loader's process and its worker processes: small frozen
dataclasses, each side dispatching on the type (never on a tuple's length).

Two one-way pipes per child. Tensors in a batch travel as shared-memory handles, through
``torch.multiprocessing``'s reductions of ``ForkingPickler``.

Parent to child (:data:`ToChild`): :class:`StartEpoch`, :class:`LoadBatch` (map-style and
async), :class:`Credit` (``IterableDataset``: send one more batch), :class:`NoMoreBatches`,
:class:`Taken` and :class:`Needed` (``max_bytes_in_flight``), :class:`Cancel`, :class:`Exit`,
:class:`SendStacks` (``stall_report_after``).

Child to parent (:data:`ToParent`): :class:`BatchDone`, :class:`BatchFailed`,
:class:`EpochEnded`, :class:`Stacks` (the answer to :class:`SendStacks`), each carrying the child's :class:`News` (or ``None``). The parent's
own :class:`WorkerLost` (a child's process ended) goes through the same dispatch.

Every message but :class:`Exit` names its epoch (``epoch``): a message of an earlier epoch is
recognised and dropped (its stats still count).
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeAlias

import datapipes as dp
from torch_threadloader.over_budget import OverBudgetRecord
from torch_threadloader.processes.errors import PackedError
from torch_threadloader.tags import Tag, WorkerTag
from torch_threadloader.userdata import Batch, Index

__all__ = [
    "BatchDone",
    "BatchFailed",
    "BatchTag",
    "Cancel",
    "Credit",
    "EpochEnded",
    "Exit",
    "LoadBatch",
    "News",
    "NoMoreBatches",
    "SendStacks",
    "SkipRecord",
    "Stacks",
    "StartEpoch",
    "Needed",
    "StatsDict",
    "TaggedBatch",
    "Taken",
    "ToChild",
    "ToParent",
    "WorkerLost",
    "batch_tag",
]

#: The batch a result is for: its number in the child's share (map-style, async; in the
#: loader's process, its position in the epoch), a worker's tag (:data:`~torch_threadloader.tags.WorkerTag`), or ``None`` when unknown.
BatchTag: TypeAlias = "int | WorkerTag | None"
#: What a child's graph and the loader's process's ``ProcessGraph`` yield: ``(tag, batch)``.
TaggedBatch: TypeAlias = tuple[BatchTag, Batch]
#: A stats snapshot by name, as ``stats()`` and ``LoaderStats.drain()`` make them.
StatsDict: TypeAlias = dict[str, Any]
#: One skipped sample's record, as ``ErrorPolicy.drain()`` makes it (its ``"batch"`` is the
#: batch's number in the child's share; the parent names the batch's place in the epoch).
SkipRecord: TypeAlias = dict[str, Any]


class _Message:
    """A message's pickle is its class and its fields' values, as a tuple's (a dataclass's
    own ``__getstate__`` with slots costs about ten times as much per message)."""

    __slots__ = ()

    def __reduce__(self) -> tuple[type[_Message], tuple[object, ...]]:
        names: tuple[str, ...] = self.__slots__
        return type(self), tuple([getattr(self, name) for name in names])


# -- parent to child ---------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, slots=True)
class StartEpoch(_Message):
    """Open epoch ``epoch``: its base seed, and for a resumed ``IterableDataset`` this child's
    part of the resume (its workers' states and whose turn is first)."""

    epoch: int
    base_seed: int
    resume: dp.StateDict | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class LoadBatch(_Message):
    """Load the batch of ``indices`` (map-style, async). With ``in_order=True`` its ``slot``:
    the batch at position ``p`` of the epoch is slot ``p // P`` of process ``p % P``, loaded
    by its thread ``slot % n``; ``None``: by its number in this child's share."""

    epoch: int
    indices: Index
    slot: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Credit(_Message):
    """``IterableDataset``: the child may send one more batch of ``epoch``."""

    epoch: int


@dataclasses.dataclass(frozen=True, slots=True)
class NoMoreBatches(_Message):
    """No more :class:`LoadBatch` this epoch: the child's graph ends after the ones it has."""

    epoch: int


@dataclasses.dataclass(frozen=True, slots=True)
class Taken(_Message):
    """``max_bytes_in_flight``: the caller took the batch this child numbered ``number`` in its
    share of ``epoch``; its bytes are given back (applied on the child's inbox thread)."""

    epoch: int
    number: int


@dataclasses.dataclass(frozen=True, slots=True)
class Needed(_Message):
    """``max_bytes_in_flight``: the batch this child numbered ``number`` in its share of
    ``epoch`` is the oldest the caller has not taken, of every process: the one batch admitted
    past the budget (applied on the child's inbox thread)."""

    epoch: int
    number: int


@dataclasses.dataclass(frozen=True, slots=True)
class Cancel(_Message):
    """Stop epoch ``epoch`` now (and every earlier one)."""

    epoch: int


@dataclasses.dataclass(frozen=True, slots=True)
class Exit(_Message):
    """Stop every epoch and exit the process."""


@dataclasses.dataclass(frozen=True, slots=True)
class SendStacks(_Message):
    """Send the stacks of your threads now (a :class:`Stacks`), stopping nothing: the parent's
    ``next()`` has waited ``stall_report_after`` seconds in ``epoch``."""

    epoch: int


ToChild = StartEpoch | LoadBatch | Credit | NoMoreBatches | Taken | Needed | Cancel | Exit | SendStacks


# -- child to parent ---------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, slots=True)
class News(_Message):
    """What the parent's loader-level books lack, since the child's last message: its stats
    (``stats=True``: each worker stage's counts and latencies, the scheduler samples, the
    process's CPU time), the samples it skipped (``on_error``: each record naming its batch by
    its number in this child's share), its byte budget's report (``max_bytes_in_flight``) and
    the samples its workers made batches of one over ``max_batch_cost`` (an ``IterableDataset``'s
    streams cut in the child: each indexed ``(worker among all, number in its stream)``)."""

    stats: StatsDict | None = None
    errors: list[SkipRecord] | None = None
    budget: tuple[int, int] | None = None
    over_budget: list[OverBudgetRecord] | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class BatchDone(_Message):
    """A batch: ``tag`` is its number in this child's share (map-style, async) or
    ``(worker, state, ended[, items])`` with the child's local worker number (``IterableDataset``)."""

    epoch: int
    tag: BatchTag
    batch: Batch
    news: News | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class BatchFailed(_Message):
    """A batch that raised: ``tag`` as :class:`BatchDone`'s (``None`` when unknown)."""

    epoch: int
    tag: BatchTag
    error: PackedError
    news: News | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class EpochEnded(_Message):
    """The child's graph for ``epoch`` ended: its ``stats()``."""

    epoch: int
    stats: StatsDict
    news: News | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Stacks(_Message):
    """The answer to :class:`SendStacks`: each thread of the child but its inbox reader, as
    ``(name, stage, stack lines)``; ``stage`` as ``torch_threadloader.stall`` names it (None: the
    loader's own code)."""

    epoch: int
    threads: tuple[tuple[str, str | None, tuple[str, ...]], ...]
    news: None = None


ToParent = BatchDone | BatchFailed | EpochEnded | Stacks


# -- in the parent -----------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, slots=True)
class WorkerLost(_Message):
    """Child ``child``'s process ended (or its pipe broke): ``why`` says how."""

    child: int
    why: str


def batch_tag(tag: Tag | None) -> BatchTag:
    """``tag`` as a child's result carries it: a batch number or a worker's tag; ``None`` for
    any other (a child's graph tags its batches no other way)."""
    if tag is None or isinstance(tag, int):
        return tag
    if len(tag) == 3 and isinstance(tag[0], int) and isinstance(tag[2], bool):
        return tag[0], tag[1], tag[2]
    if len(tag) == 4 and isinstance(tag[0], int) and isinstance(tag[2], bool) and isinstance(tag[3], int | None):
        return tag[0], tag[1], tag[2], tag[3]
    return None
