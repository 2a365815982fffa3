"""``max_batch_cost`` with an ``IterableDataset``: each worker cuts its own stream by cost.

As torch cuts an iterable's batches per worker (each worker's stream into batches of
``batch_size``, the batches taken from the workers in turn), each worker here reads its copy's
iterator and cuts it with :class:`datapipes.cost_batcher.CostCut`: ``cost_mode``,
``group_window`` (windows of the worker's own stream: its samples ``0..W-1``, ``W..2W-1``, ...),
``batch_size`` the most samples a batch takes, a sample over the budget alone a batch of one.
With ``drop_last`` the samples torch leaves out are left out: a worker's last ``n %
batch_size`` samples.

Resume replays. A batch's tag carries the worker's *replay point*: ``start``, the number (in
the worker's stream) of the first sample of the window the oldest sample not delivered belongs
to (without ``group_window``, that sample's own number), ``drop``, how many of that window's
samples (in its cut order) were delivered, and ``read``, the samples handed out so far (to the
cut, or raised: failed ones included). A resumed worker reads again up to ``start`` (a dataset
with its own ``state_dict()`` loads its state at ``start`` instead, taken before that window's
first sample was read), gathers the rest again, takes off ``drop`` uncut, and raises no error
again for a sample before ``read`` (it was raised then). With a deterministic ``sample_cost``
it then cuts exactly the batches the whole epoch did.

With ``worker_processes`` each worker's stream is cut so in the worker process that reads it
(its thread ``t`` is the loader's worker ``t * P + c``, the number its samples are named and
recorded by): the same batches, their tags made global by the parent; the over-budget records
go to the parent with the process's news.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import NamedTuple, TypedDict

from datapipes import CostCut
from torch_threadloader.fetch import IterableWorkerStream
from torch_threadloader.over_budget import OverBudgetLog
from torch_threadloader.resume import is_stateful, snapshot
from torch_threadloader.resume.data import OwnState
from torch_threadloader.skip import note_raised_in
from torch_threadloader.stats import LoaderStats
from torch_threadloader.tags import WorkerTag
from torch_threadloader.userdata import Batch, CollateFn, Sample, UserObject

__all__ = ["CostSettings", "CostStream", "ReplayPoint", "sample_name"]


class ReplayPoint(TypedDict):
    """Where a worker's cut resumes (see the module's docstring); ``own``: the dataset's own
    state at ``from`` (None without one)."""

    own: OwnState
    start: int
    drop: int
    read: int


class CostSettings(NamedTuple):
    """The cut's settings, and what a sample over the budget alone is told to."""

    max_cost: int
    sample_cost: Callable[[Sample], int]
    checked: Callable[[object, str], int]  # sample_cost's value checked, naming the sample
    batch_size: int
    mode: str
    group_window: int | None
    over: OverBudgetLog
    epoch: int


def sample_name(worker: int, number: int) -> str:
    """Sample ``number`` of worker ``worker``'s stream (among all the loader's workers), in words."""
    return f"sample #{number} of worker {worker}'s iterator"


class _Read(NamedTuple):
    """A sample read: its number in the worker's stream, its value and cost."""

    number: int
    value: Sample
    cost: int


class _Failed(NamedTuple):
    error: Exception


class _Reader:
    """A worker's samples in its stream's order, each numbered and costed. Reads in chunks of
    ``chunk`` with ``drop_last`` (a short last chunk's samples are left out); an error (of the
    iterator or of ``sample_cost``) is raised when its sample's turn comes, except before
    ``quiet_below``, where it was raised before the resume. ``before_read(n)`` is called before
    sample ``n`` is read."""

    def __init__(
        self,
        stream: CostStream,
        settings: CostSettings,
        chunk: int | None,
        before_read: Callable[[int], None] | None,
    ) -> None:
        self.stream = stream
        self.settings = settings
        self.chunk = chunk
        self.before_read = before_read
        self.next_number = 0  # the number of the next sample the iterator gives
        self.handed_out = 0  # the number after the last sample pulled (its error raised, or given to the cut)
        self.quiet_below = 0
        self.pending: deque[tuple[int, Sample | _Failed]] = deque()
        self.exhausted = False

    def skip(self, count: int) -> None:
        """Read and drop samples up to number ``count`` (errors were raised before the resume)."""
        it = self.stream.iterator
        while self.next_number < count:
            try:
                next(it)
            except StopIteration:
                self.exhausted = True
                return
            except Exception:
                pass
            self.next_number += 1

    def done(self) -> bool:
        """Nothing is left to read or to hand out."""
        return self.exhausted and not self.pending

    def pull(self) -> _Read:
        while True:
            if not self.pending:
                self._fill()
                if not self.pending:
                    raise StopIteration
            number, value = self.pending.popleft()
            self.handed_out = max(self.handed_out, number + 1)
            read = self._costed(number, value)
            if read is not None:
                return read

    def _costed(self, number: int, value: Sample | _Failed) -> _Read | None:
        quiet = number < self.quiet_below
        if isinstance(value, _Failed):
            if quiet:
                return None
            raise value.error
        settings = self.settings
        try:
            return _Read(number, value, settings.checked(settings.sample_cost(value), self.stream.name_of(number)))
        except Exception as exc:
            if quiet:
                return None
            exc.add_note(f"[threadloader] raised by sample_cost for {self.stream.name_of(number)}")
            raise

    def _fill(self) -> None:
        """Read the next sample, or (``chunk``) the rest of its chunk."""
        if self.exhausted:
            return
        first = self.next_number
        end = first + 1 if self.chunk is None else (first // self.chunk + 1) * self.chunk
        while self.next_number < end and self._read_one():
            pass
        if self.exhausted and self.chunk is not None and self.next_number % self.chunk:
            # torch's drop_last: the samples of the short last chunk are left out (errors stay)
            kept = [(n, v) for n, v in self.pending if isinstance(v, _Failed)]
            self.pending = deque(kept)

    def _read_one(self) -> bool:
        number = self.next_number
        if self.before_read is not None:
            self.before_read(number)
        stats = self.stream.stats
        start = time.perf_counter() if stats is not None else 0.0
        try:
            value: Sample | _Failed = next(self.stream.iterator)
        except StopIteration:
            self.exhausted = True
            return False
        except Exception as exc:
            note_raised_in(exc, "the dataset's iterator", f"at {self.stream.name_of(number)}", called=False)
            value = _Failed(exc)
        if stats is not None:
            stats.stages["fetch"].record(time.perf_counter() - start)
        self.next_number += 1
        self.pending.append((number, value))
        return True


class CostStream(IterableWorkerStream):
    """Worker ``worker_id``'s stream of an ``IterableDataset`` cut by cost: each call gives
    ``(tag, batch)``, the tag ``(worker_id, ReplayPoint, ended)``; ``ended``: nothing is left.
    ``saved``: the tag's replay point of the last batch this worker delivered, to resume from.
    ``named``: the worker's number among all the loader's workers (in a worker process, its
    thread's is ``worker_id``), which names and records its samples."""

    def __init__(
        self,
        dataset: UserObject,  # an IterableDataset, maybe with state_dict()/load_state_dict()
        settings: CostSettings,
        *,
        worker_id: int,
        saved: ReplayPoint | None,
        drop_last: bool,
        collate_fn: CollateFn,
        finish: Callable[[Batch], Batch] | None,
        worker: bool,
        stats: LoaderStats | None,
        named: int | None = None,
    ) -> None:
        own = is_stateful(dataset)
        if own and saved is not None and saved["own"] is not None:
            dataset.load_state_dict(saved["own"])
        super().__init__(
            dataset, batch_size=settings.batch_size, drop_last=drop_last, collate_fn=collate_fn, finish=finish,
            worker=worker, tag=self._worker_tag, stats=stats,
        )  # fmt: skip
        self.worker_id = worker_id
        self.named = worker_id if named is None else named
        self.settings = settings
        self._dataset = dataset
        self._window = settings.group_window or 1  # the replay's windows (one sample each without group_window)
        self._snapshots: dict[int, OwnState] = {}  # own states taken before a window's first sample
        self._reader = _Reader(
            self, settings, settings.batch_size if drop_last else None, self._before if own else None
        )
        self._cut: CostCut[_Read] = CostCut(
            self._reader.pull, settings.max_cost, _cost, batch_size=settings.batch_size, mode=settings.mode,
            group_window=settings.group_window, key=_number, on_over=self._over,
        )  # fmt: skip
        start = saved["start"] if saved is not None else 0
        self._to_drop = saved["drop"] if saved is not None else 0
        # The window of the last sample delivered, and how many of that window's were.
        self._last = (start // self._window, self._to_drop)
        if saved is not None:
            if own:
                self._reader.next_number = start
            else:
                self._reader.skip(start)
            self._reader.quiet_below = self._reader.handed_out = saved["read"]

    def name_of(self, number: int) -> str:
        """A sample of this worker in words."""
        return sample_name(self.named, number)

    def _before(self, number: int) -> None:
        if number % self._window == 0:
            self._snapshots[number] = snapshot(self._dataset.state_dict(), self._dataset)

    def _over(self, read: _Read, cost: int) -> None:
        settings = self.settings
        settings.over.add(
            (self.named, read.number), cost, settings.epoch, settings.max_cost, where=self.name_of(read.number)
        )

    def _next(self) -> Batch:
        if self._to_drop:
            self._cut.drop(self._to_drop)
            self._to_drop = 0
        try:
            taken = self._cut.next_list()
        except StopIteration:
            self._ended = True
            raise
        window, delivered = self._last
        for read in taken:
            mine = read.number // self._window
            window, delivered = (window, delivered + 1) if mine == window else (mine, 1)
        self._last = (window, delivered)
        return self._collated(taken)

    def _collated(self, taken: list[_Read]) -> Batch:
        def where() -> str:
            numbers = ", ".join(f"#{read.number}" for read in taken)
            return f"for the batch of samples {numbers} of worker {self.named}'s iterator"

        return self.collate_as_worker([read.value for read in taken], where)

    def replay_point(self) -> ReplayPoint:
        """Where this worker resumes after what it has handed out (batches and errors)."""
        reader = self._reader
        head = self._cut.head()
        if self._to_drop:  # not yet taken off: the point resumed from stands
            window, drop = self._last
        elif head is not None or reader.pending:
            # The oldest sample not delivered: the cut's next, else the next read ahead.
            window = (head.number if head is not None else reader.pending[0][0]) // self._window
            drop = self._last[1] if self._last[0] == window else 0
        else:
            window, drop = reader.next_number // self._window, 0
        start = window * self._window
        own: OwnState = None
        if reader.before_read is not None:
            for number in [n for n in self._snapshots if n < start]:
                del self._snapshots[number]
            if start not in self._snapshots:  # no sample of that window read yet: the state now
                self._snapshots[start] = snapshot(self._dataset.state_dict(), self._dataset)
            own = self._snapshots[start]
        return {"own": own, "start": start, "drop": drop, "read": reader.handed_out}

    def _worker_tag(self, _stream: IterableWorkerStream) -> WorkerTag:
        ended = self._reader.done() and self._cut.head() is None
        return self.worker_id, self.replay_point(), ended


def _cost(read: _Read) -> int:
    return read.cost


def _number(read: _Read) -> int:
    return read.number
