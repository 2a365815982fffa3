"""The batches of one worker of an ``IterableDataset``, as torch's ``_IterableDatasetFetcher``
makes them in one worker process."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Iterator

import datapipes as dp
from torch_threadloader.skip import note_raised_in
from torch_threadloader.stats import LoaderStats, set_current
from torch_threadloader.tags import Tag, Tagged, tag_error
from torch_threadloader.userdata import Batch, CollateFn, Sample
from torch_threadloader.worker_info import get_worker_info, hidden_from_torch

__all__ = ["IterableWorkerStream"]


class _Counted(Iterator[Sample]):
    """An iterator that counts the items taken from it, failed ones included."""

    __slots__ = ("count", "it")

    def __init__(self, it: Iterator[Sample]) -> None:
        self.it = it
        self.count = 0

    def __next__(self) -> Sample:
        try:
            item = next(self.it)
        except StopIteration:
            raise
        except BaseException:
            self.count += 1
            raise
        self.count += 1
        return item

    def __iter__(self) -> _Counted:
        return self


class IterableWorkerStream:
    """The batches of one worker of an ``IterableDataset``, as torch's
    ``_IterableDatasetFetcher`` makes them in one worker process: started on the worker's
    thread (its dataset copy, info and ``worker_init_fn``), ``iter(dataset)`` once; each call
    then collates up to ``batch_size`` items (ending on an empty or, with ``drop_last``, a
    short batch), or converts one item without batching. ``StopIteration`` ends the stream.

    Resume: ``skip_items`` items are read and dropped first (a dataset without state of its
    own, resumed after the batches it delivered). With ``tag``, each batch comes as ``(tag(self),
    batch)``, ``tag(self)`` called after the batch was made (an error carries it).
    """

    def __init__(
        self,
        dataset: Iterable[Sample],
        *,
        batch_size: int | None,
        drop_last: bool,
        collate_fn: CollateFn,
        finish: Callable[[Batch], Batch] | None,
        worker: bool,
        skip_items: int = 0,
        tag: Callable[[IterableWorkerStream], Tag] | None = None,
        stats: LoaderStats | None = None,
        count_items: bool = False,
    ) -> None:
        self.stats = stats
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.collate_fn = collate_fn
        self.finish = finish
        self.worker = worker
        self._it: Iterator[Sample] = iter(dataset)
        self._counted: _Counted | None = None
        if count_items:  # the items read, failing ones included: what a resume reads again
            self._counted = _Counted(self._it)
            self._it = self._counted
        self._ended = False
        self.exhausted = False  # the dataset's iterator ended (a short last batch was made)
        self._skip = skip_items
        self._tag = tag
        self._read = skip_items  # samples taken from the dataset's iterator, for error notes

    def __iter__(self) -> IterableWorkerStream:
        return self

    @property
    def iterator(self) -> Iterator[Sample]:
        """The dataset's iterator, as ``iter(dataset)`` made it."""
        return self._counted.it if self._counted is not None else self._it

    @property
    def items_read(self) -> int:
        """Items taken from the dataset's iterator (with ``count_items``), failures included."""
        return self._counted.count if self._counted is not None else 0

    def __call__(self, _token: object = None) -> Batch | Tagged:
        return next(self)

    def __next__(self) -> Batch | Tagged:
        """The next batch; with ``tag``, ``(tag, batch)``."""
        if self._ended:
            raise StopIteration
        if self._skip:
            self._skip_items()
        if self.stats is not None:
            set_current(self.stats)
        tag = self._tag
        if tag is None:
            return self._next()
        try:
            batch = self._next()
        except StopIteration:
            raise
        except BaseException as exc:
            tag_error(exc, tag(self))
            raise
        return tag(self), batch

    def _skip_items(self) -> None:
        """Read again and drop the items the resumed run delivered (or failed on)."""
        skip, self._skip = self._skip, 0
        it = self._it
        for _ in range(skip):
            try:
                next(it)
            except StopIteration:
                return
            except Exception:
                pass  # an item that failed in the run resumed: it was delivered as its error

    def _next(self) -> Batch:
        stats = self.stats
        start = time.perf_counter() if stats is not None else 0.0
        first = self._read
        if self.batch_size is None:
            try:
                item = next(self._it)
            except StopIteration:
                self._ended = True
                raise
            except Exception as exc:
                self._read += 1
                note_raised_in(exc, "the dataset's iterator", f"at sample #{first}{_owner()}", called=False)
                raise
            self._read += 1
            if stats is not None:
                stats.stages["fetch"].record(time.perf_counter() - start)
            return self._collate(item, first)
        data: list[Sample] = []
        try:
            data.extend(itertools.islice(self._it, self.batch_size))  # keeps the items before an error
        except Exception as exc:
            self._read += len(data) + 1
            note_raised_in(exc, "the dataset's iterator", f"at sample #{first + len(data)}{_owner()}", called=False)
            raise
        self._read += len(data)
        if stats is not None and data:
            each = (time.perf_counter() - start) / len(data)
            stats.stages["fetch"].record_many([each] * len(data))
        if len(data) < self.batch_size:
            self.exhausted = True
        if not data or (self.drop_last and len(data) < self.batch_size):
            self._ended = True
            raise StopIteration
        return self._collate(data, first)

    def _collate(self, data: list[Sample] | Sample, first: int) -> Batch:
        def where() -> str:
            last = self._read - 1
            samples = f"samples #{first} to #{last}" if last > first else f"sample #{first}"
            return f"for the batch of {samples}{_owner()}"

        return self.collate_as_worker(data, where)

    def collate_as_worker(self, data: list[Sample] | Sample, where: Callable[[], str]) -> Batch:
        """``collate_fn(data)`` (torch's worker info hidden in a worker thread), timed with
        stats, then ``finish``; an error is noted as raised by ``collate_fn`` ``where()``."""
        start = time.perf_counter()
        try:
            if self.worker:
                with hidden_from_torch():
                    batch = self.collate_fn(data)
            else:
                batch = self.collate_fn(data)
        except Exception as exc:
            note_raised_in(exc, "collate_fn", where(), called=False)
            raise
        if self.stats is not None:
            self.stats.stages["collate"].record(time.perf_counter() - start)
        return batch if self.finish is None else self.finish(batch)

    def close(self) -> None:
        self.shutdown()

    def shutdown(self, timeout: float | None = dp.DEFAULT_JOIN_TIMEOUT, *, warn: bool = True) -> bool:
        """End the stream; a dataset's iterator that is a node epoch stops within ``timeout``."""
        self._ended = True
        shutdown = getattr(self.iterator, "shutdown", None)
        if shutdown is not None:
            return shutdown(timeout, warn=warn) is not False
        close = getattr(self.iterator, "close", None)
        if close is not None:
            close()
        return True


def _owner() -> str:
    """Whose iterator the calling thread reads, in words."""
    info = get_worker_info()
    return " of the iterator" if info is None else f" of worker {info.id}'s iterator"
