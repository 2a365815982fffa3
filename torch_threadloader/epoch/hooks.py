"""Per-batch extras of an epoch, chosen once when it opens (:func:`choose`): the source its
``next()`` pulls, what is done with each batch taken (``after``) and with each error (``failed``).
On the lean path (a map-style dataset without workers, stats or skips) the source is the
``Mapper``'s own ``map()`` and both hooks are None: ``next()`` does nothing else per batch."""

from __future__ import annotations

import dataclasses
import time
import warnings
import weakref
from collections.abc import Callable, Iterator
from typing import Protocol

import datapipes as dp
from torch_threadloader.budget import ByteBudget
from torch_threadloader.resume import EpochRecord
from torch_threadloader.stats import LoaderStats
from torch_threadloader.tags import NO_TAG, Tag, Tagged, tag_of
from torch_threadloader.userdata import Batch, UserObject

__all__ = ["ENDED", "Hooks", "LengthCheck", "choose", "closed_hooks"]

#: The source of an epoch closed under a lean ``next()``: a ``next()`` after ``close()`` ends.
ENDED: Iterator[Batch] = iter(())


class Pulled(Protocol):
    """Counts the batches taken: a lean epoch's ``MapperIterator``, else a ``_Tally``."""

    pulled: int


class _Closed(Protocol):
    @property
    def closed(self) -> bool: ...


class LeanEpoch(Protocol):
    """What the lean path's first ``next()`` reads and sets of its epoch (an ``Epoch``): the
    source its ``next()`` pulls, and whether its run was closed."""

    _source: Iterator[Batch]

    @property
    def _run(self) -> _Closed: ...


class _Tally:
    """Counts the batches taken where no mapper counts them (a lean epoch's mapper does)."""

    __slots__ = ("pulled",)

    def __init__(self) -> None:
        self.pulled = 0


@dataclasses.dataclass
class Hooks:
    """What an epoch's ``next()`` does: ``next(source)``, ``tally.pulled += 1``, then
    ``after(batch)`` when there is one; ``failed(exc)`` for an error from the source."""

    source: Iterator[Batch]  # a tagged epoch's graph yields (tag, batch): ``after`` takes it apart
    tally: Pulled
    after: Callable[[Batch], Batch] | None = None
    failed: Callable[[BaseException], None] | None = None
    mapped: bool = False  # the source is a mapper's map(): close() must end it (see ENDED)


def choose(
    epoch: LeanEpoch,
    it: dp.NodeIterator[Batch],
    record: EpochRecord,
    *,
    stats: LoaderStats | None,
    budget: ByteBudget | None,
    length_check: Callable[[Batch], Batch] | None,
) -> Hooks:
    """The hooks of an epoch over the graph iterator ``it`` (``epoch``: held weakly, by the
    lean path's first ``next()`` only)."""
    tagged = record.tagged
    lean = not tagged and stats is None and length_check is None and budget is None
    if lean and isinstance(it, dp.MapperIterator):
        return Hooks(_FirstPull(epoch, it), it, failed=it.failed, mapped=True)
    if lean:
        return Hooks(it, _Tally())
    source: Iterator[Batch] = _Timed(it, stats) if stats is not None else it
    after: Callable[[Batch], Batch] | None = length_check
    if tagged:
        if isinstance(length_check, LengthCheck):
            length_check.stacklevel += 1  # called by the positions' hook
        after = _positions(record, budget, then=length_check)
    return Hooks(source, _Tally(), after=after, failed=_tag_failures(record, budget) if tagged else None)


def closed_hooks() -> Hooks:
    """The hooks of an epoch closed before its graph was open: its ``next()`` ends (raising
    ``EpochClosedError`` when another thread closed it)."""
    return Hooks(ENDED, _Tally())


class _FirstPull:
    """A lean epoch's source until its first ``next()``: then the mapper's ``map()`` (whose
    sampler draws at that moment, as torch's does) becomes the epoch's source."""

    def __init__(self, epoch: LeanEpoch, mapper: dp.MapperIterator[Batch]) -> None:
        self._epoch = weakref.ref(epoch)
        self._mapper = mapper

    def __iter__(self) -> _FirstPull:
        return self

    def __next__(self) -> Batch:
        raw = self._mapper.raw()
        epoch = self._epoch()
        if epoch is None:
            return next(raw)
        if epoch._source is self:
            epoch._source = raw
            # A close() from another thread sets ``closed`` (under its lock), then ENDED: one
            # between the check and the swap is seen here, and its ENDED put back.
            if epoch._run.closed:
                epoch._source = ENDED
        source = epoch._source
        # An exception the caller keeps holds this frame: it must not keep the epoch (and the
        # thread its run may own) alive once the caller drops the iterator.
        del epoch
        return next(source)


class _Timed:
    """``stats=True``: the caller's wait in ``next()`` (``handover``) and its time between
    batches (``train``), for each batch taken from ``source``."""

    def __init__(self, source: Iterator[Batch], stats: LoaderStats) -> None:
        self._source = source
        self._stats = stats
        self._returned = 0.0  # when next() last returned a batch

    def __iter__(self) -> _Timed:
        return self

    def __next__(self) -> Batch:
        entered = time.perf_counter()
        batch = next(self._source)
        now = time.perf_counter()
        self._stats.handed(now - entered, entered - self._returned if self._returned else None)
        self._returned = now
        return batch


def _positions(
    record: EpochRecord, budget: ByteBudget | None, *, then: Callable[[Batch], Batch] | None
) -> Callable[[Tagged], Batch]:
    """Each batch comes as ``(tag, batch)``: the tag (its position) is recorded as delivered,
    the byte budget told the batch was taken, and ``then`` given the batch."""

    def after(tagged: Tagged) -> Batch:
        tag, batch = tagged
        record.add(tag)
        _taken(budget, tag, record)
        return batch if then is None else then(batch)

    return after


def _tag_failures(record: EpochRecord, budget: ByteBudget | None) -> Callable[[BaseException], None]:
    """A failed batch is delivered (as an error), as torch goes on: its tag is recorded."""

    def failed(exc: BaseException) -> None:
        tag = tag_of(exc)
        if tag is not NO_TAG:
            record.add(tag)
            _taken(budget, tag, record)

    return failed


def _taken(budget: ByteBudget | None, tag: Tag, record: EpochRecord) -> None:
    """The byte budget (if any) told the batch ``tag`` was taken: a budget's batches are
    map-style ones, tagged with their position."""
    if budget is not None and isinstance(tag, int):
        budget.taken(tag, record.frontier)


class LengthCheck:
    """torch's warning when an IterableDataset yields more batches than ``len(loader)`` said
    (its ``_BaseDataLoaderIter.__next__``, its words, so filters written for them match)."""

    def __init__(self, dataset: UserObject, length: int, num_workers: int) -> None:
        self._dataset = dataset
        self._length = length
        self._num_workers = num_workers
        self._yielded = 0
        self.stacklevel = 4  # warn <- _warn <- __call__ <- the epoch's __next__ <- the caller

    def __call__(self, batch: Batch) -> Batch:
        self._yielded += 1
        if self._yielded > self._length:
            self._warn()
        return batch

    def _warn(self) -> None:
        message = (
            f"Length of IterableDataset {self._dataset} was reported to be {self._length}"
            f"(when accessing len(dataloader)), but {self._yielded} samples have been fetched. "
        )
        if self._num_workers > 0:
            message += (
                "For multiprocessing data-loading, this could be caused by not properly configuring the "
                "IterableDataset replica at each worker. Please see "
                "https://pytorch.org/docs/stable/data.html#torch.utils.data.IterableDataset for examples."
            )
        warnings.warn(message, stacklevel=self.stacklevel)
