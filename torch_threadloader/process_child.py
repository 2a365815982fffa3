"""One worker process of a ThreadLoader with ``worker_processes=P``: it runs the loader's own
thread graph (``graph.build_graph``: its ``num_workers`` threads, ``item_concurrency``, async
fetching) over the batches its parent sends, and sends each batch back through shared memory.

The wire (two one-way pipes per child; tensors travel as shared-memory handles, through
``torch.multiprocessing``'s reductions of ``ForkingPickler``):

* parent → child: ``("epoch", e, args)``, ``("item", e, indices[, slot])`` (a map-style batch
  to load, with ``in_order=True`` its ``slot``: the batch at position ``p`` of the epoch is
  slot ``p // P`` of process ``p % P``, loaded by its thread ``slot % n``; for an
  ``IterableDataset``, ``None``: leave to send one more batch), ``("end", e)`` (no more items
  this epoch), ``("taken", e, k)`` (``max_bytes_in_flight``: the caller took the batch this
  child numbered ``k``; its bytes are given back), ``("cancel", e)``, ``("exit",)``.
* child → parent: ``("ok", e, tag, batch, news)``, ``("err", e, tag, packed_error, news)``,
  ``("end", e, stats, news)`` (the epoch's graph ended; its ``stats()``);
  ``tag`` is the batch's place in this child's share (map-style, async) or
  ``(worker, state, ended)`` with the child's local worker number (``IterableDataset``);
  ``news`` is None or what the parent's loader-level stats (``stats=True``: each worker stage's
  counts and latencies since the last message, the scheduler samples, the process's CPU time)
  and skip records (``on_error``: the samples skipped, each naming its batch by its place in
  this child's share) lack.

Lifetime: the child reads its inbox on one thread; the end of the inbox (the parent closed it
or died, even by SIGKILL) makes the child exit at once (``os._exit``), so no child outlives its
parent. SIGINT is ignored: Ctrl-C is the parent's to handle, and it ends the children.
"""

from __future__ import annotations

import importlib
import os
import pickle
import queue
import signal
import threading
import traceback
import warnings
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler
from typing import Any, cast

import torch
import torch.multiprocessing

import datapipes as dp
from torch_threadloader.budget import ByteBudget
from torch_threadloader.fetch import Workers
from torch_threadloader.graph import EpochSpec, Resources, build_graph
from torch_threadloader.pipeline_stats import LoaderStats
from torch_threadloader.resume import NO_TAG, PositionLedger, tag_of
from torch_threadloader.skip import ErrorPolicy, error_text

__all__ = ["ChildSettings", "child_main", "pack_error", "unpack_error"]

#: Seconds a child waits, in all, for its threads when an epoch ends or the child exits.
CHILD_JOIN_TIMEOUT = 5.0
#: Notes the thread graph puts on an error name the item by its number in this child's share;
#: the parent replaces them with one naming the batch's place in the epoch.
_LOCAL_NOTE = "[datapipes] raised in "


class ChildSettings:
    """What a worker process needs of its loader, pickled once per child when it starts: the
    dataset, ``collate_fn``, ``worker_init_fn`` and the numbers its graph is built from. The
    graph builders read it as they read a loader (``graph.EpochSpec``)."""

    def __init__(self, loader: Any, count: int) -> None:
        self.kind: str = loader._kind
        self.dataset = loader.dataset
        self.count = count
        # Each child runs at least one worker thread: every batch is then loaded as a worker's
        # (its dataset copy, its WorkerInfo), as in torch's worker processes.
        self.num_workers = max(int(loader.num_workers), 1)
        self.prefetch_factor = loader.prefetch_factor if loader.prefetch_factor is not None else 2
        self.persistent_workers = bool(loader.persistent_workers)
        self.batch_sampler = True if loader.batch_sampler is not None else None  # auto-collation
        self.collate_fn = loader.collate_fn
        self.worker_init_fn = loader.worker_init_fn
        self.worker_copy: str = getattr(loader, "worker_copy", "shallow")
        self.item_concurrency = loader.item_concurrency
        self.return_indices = loader.return_indices
        self.in_order = loader.in_order
        self.batch_size = loader.batch_size
        self.drop_last = loader.drop_last
        self.timeout = 0  # the parent keeps the loader's timeout
        self.nice = int(getattr(loader, "process_nice", 0))
        self.affinity: tuple[frozenset[int], ...] | None = getattr(loader, "process_affinity", None)
        self.max_bytes: int | None = getattr(loader, "max_bytes_in_flight", None)
        self.keep_stats = loader._stats is not None
        self.on_error = loader.on_error
        # Made in the child (see ``in_child``), read as a loader's by the graph builders.
        self._stats: LoaderStats | None = None
        self._errors: ErrorPolicy | None = None

    def in_child(self) -> None:
        """The child's own stats (drained to the parent with each batch). Its skipping policy
        is made per epoch (``_Child.epoch``); its records go to the parent, which counts
        ``max_errors`` for the whole epoch."""
        if self.keep_stats:
            self._stats = LoaderStats(self.num_workers, self.item_concurrency, drained=True)

    @property
    def budget_share(self) -> int | None:
        """Bytes each process may hold (``max_bytes_in_flight // P``), or None."""
        return None if self.max_bytes is None else max(self.max_bytes // self.count, 1)

    @property
    def capacity(self) -> int:
        """Batches one child's graph holds (loading, or done and waiting): its workers times
        ``prefetch_factor``."""
        return self.num_workers * self.prefetch_factor

    @property
    def total_workers(self) -> int:
        """Workers of the whole loader: thread ``t`` of child ``c`` is worker ``t * P + c``."""
        return self.num_workers * self.count


def pack_error(exc: BaseException) -> tuple[bytes | None, str, str, str]:
    """``exc`` for the trip to the parent: pickled when it survives a round trip, and always
    its type's name, message and formatted traceback (the parent rebuilds from those when the
    pickle does not load). Never raises: an exception whose ``str()`` raises travels with a
    message saying so (``traceback`` formats it so too)."""
    notes = getattr(exc, "__notes__", None)
    if isinstance(notes, list):
        notes[:] = [n for n in notes if not (isinstance(n, str) and n.startswith(_LOCAL_NOTE))]
    text = "".join(traceback.format_exception(exc))
    blob: bytes | None
    try:
        blob = pickle.dumps(exc)
        pickle.loads(blob)
    except Exception:
        blob = None
    cls = type(exc)
    return blob, f"{cls.__module__}:{cls.__qualname__}", error_text(exc), text


def unpack_error(packed: tuple[bytes | None, str, str, str]) -> BaseException:
    """The exception :func:`pack_error` packed: the same type and message (its attributes too
    when it pickles). One that does not pickle is rebuilt as ``type(message)``; a type that
    cannot be imported or built so becomes a ``RuntimeError`` naming it."""
    blob, name, message, _ = packed
    if blob is not None:
        try:
            exc = pickle.loads(blob)
            if isinstance(exc, BaseException):
                return exc
        except Exception:
            pass
    module, _, qualname = name.partition(":")
    try:
        cls: Any = importlib.import_module(module)
        for part in qualname.split("."):
            cls = getattr(cls, part)
        if isinstance(cls, type) and issubclass(cls, BaseException):
            return cls(message)
    except Exception:
        pass
    return RuntimeError(f"{module}.{qualname}: {message}")


def child_main(
    index: int, settings: ChildSettings, inbox: Connection, outbox: Connection, close_here: list[Connection]
) -> None:
    """The body of worker process ``index`` (``multiprocessing.Process`` target)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for conn in close_here:  # started by fork: the parent's ends of the pipes are here too
        conn.close()
    torch.set_num_threads(1)  # as torch's worker processes; each loader thread sets its own too
    if settings.nice:
        # Before any thread starts: on Linux the nice level is per thread, and inherited.
        os.nice(settings.nice)
    if settings.affinity is not None:  # per thread too, and inherited by the threads it starts
        os.sched_setaffinity(0, settings.affinity[index])
    settings.in_child()
    _Child(index, settings, inbox, outbox).run()


_EXIT = ("exit",)


class _ShareOfWorkers:
    """Child ``c``'s view of the loader's ``P * n`` workers: its thread ``t`` is worker
    ``t * P + c`` (so batch ``i`` is loaded by worker ``i % (P * n)``, as in one process
    with ``P * n`` worker threads)."""

    def __init__(self, workers: Workers, child: int, count: int, local: int) -> None:
        self._workers = workers
        self._child = child
        self._count = count
        self.num_workers = local

    def start(self, worker_id: int) -> Any:
        return self._workers.start(worker_id * self._count + self._child)

    def info(self, worker_id: int) -> Any:
        return self._workers.info(worker_id * self._count + self._child)


class _Child:
    """Owns the process's threads: the inbox reader (daemon: it ends the process when the
    parent goes) and, per epoch, the graph's threads, run from the main thread."""

    def __init__(self, index: int, settings: ChildSettings, inbox: Connection, outbox: Connection) -> None:
        self.index = index
        self.settings = settings
        self.inbox = inbox
        self.outbox = outbox
        self.queue: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.current: tuple[int, dp.NodeIterator[Any]] | None = None  # guarded by lock
        self.budget: tuple[int, _LocalBudget] | None = None  # the current epoch's; guarded by lock
        self.cancelled = -1  # epochs up to this one are cancelled; guarded by lock
        self.held: tuple[Any, ...] | None = None  # a message an epoch's inbox read for the main loop
        self.workers: Workers | None = None  # persistent_workers: kept across epochs
        self.workers_seed: int | None = None
        self.kept: Resources | None = None  # persistent_workers: pools and loop kept across epochs

    # -- the inbox reader ----------------------------------------------------------------------
    def receive(self) -> None:
        try:
            while True:
                message = self.inbox.recv()
                try:
                    if message[0] == "taken":  # now, on this thread: a worker may wait for that room
                        self.taken(int(message[1]), int(message[2]))
                        continue
                    if message[0] == "cancel":
                        self.cancel(int(message[1]))
                    elif message[0] == "exit":
                        self.cancel(None)
                except Exception as exc:  # the reader must live on: the parent waits on its replies
                    warnings.warn(
                        f"worker process {self.index}: handling {message[0]!r} failed: {exc!r}",
                        RuntimeWarning,
                        stacklevel=1,
                    )
                self.queue.put(message)
                if message[0] == "exit":
                    return
        except (EOFError, OSError):
            os._exit(0)  # the parent closed the pipe without "exit", or died: go now

    def taken(self, epoch: int, position: int) -> None:
        with self.lock:
            budget = self.budget
        if budget is not None and budget[0] == epoch:
            budget[1].taken(position)

    def cancel(self, epoch: int | None) -> None:
        """Stop epoch ``epoch`` (every epoch for ``None``) now: a ``next()`` the main thread
        waits in raises; the main thread closes the epoch's threads within its bound."""
        with self.lock:
            self.cancelled = 1 << 62 if epoch is None else max(self.cancelled, epoch)
            current, budget = self.current, self.budget
        if budget is not None and budget[0] <= self.cancelled:
            budget[1].budget.close()  # wakes workers waiting for room, before they are stopped
        if current is not None and current[0] <= self.cancelled:
            current[1].shutdown(0, warn=False)

    # -- the main thread -----------------------------------------------------------------------
    def run(self) -> None:
        threading.Thread(target=self.receive, name="threadloader-process-inbox", daemon=True).start()
        try:
            while True:
                message = self.held or self.queue.get()
                self.held = None
                if message[0] == "exit":
                    return
                if message[0] == "epoch":
                    self.epoch(int(message[1]), message[2])
                # anything else belongs to an epoch that is over
        finally:
            if self.kept is not None:
                self.kept.close(CHILD_JOIN_TIMEOUT, warn=False)

    def send(self, message: tuple[Any, ...]) -> None:
        """``message`` and, as its last element, :meth:`news`."""
        self.outbox.send_bytes(ForkingPickler.dumps((*message, self.news())))

    def news(self) -> dict[str, Any] | None:
        """What the parent's stats and skip records lack: this process's stats since the last
        message (``stats=True``) and the samples it skipped (``on_error``); None when nothing."""
        out: dict[str, Any] = {}
        stats, policy = self.settings._stats, self.settings._errors
        if stats is not None:
            delta = stats.drain()
            if delta is not None:
                out["stats"] = delta
        if policy is not None and policy.skips:
            records = policy.drain()
            if records:
                out["errors"] = records
        with self.lock:
            budget = self.budget
        if budget is not None:
            out["budget"] = budget[1].budget.report()
        return out or None

    def send_result(self, epoch: int, tag: Any, batch: Any) -> None:
        news = self.news()
        try:
            data = ForkingPickler.dumps(("ok", epoch, tag, batch, news))
        except Exception as exc:  # the batch cannot travel: that batch fails, with the reason
            exc.add_note(f"the batch could not be sent from worker process {self.index} to the loader's process")
            data = ForkingPickler.dumps(("err", epoch, tag, pack_error(exc), news))
        self.outbox.send_bytes(data)

    def epoch_workers(self, base_seed: int, resources: Resources) -> Workers:
        settings = self.settings
        if settings.persistent_workers and self.workers is not None and self.workers_seed == base_seed:
            return self.workers
        workers = Workers(
            settings.dataset,
            settings.total_workers,
            base_seed,
            settings.worker_init_fn,
            worker_copy=settings.worker_copy,
            on_copy=resources.async_datasets.append if settings.kind == "async" else None,
        )
        if settings.persistent_workers:
            self.workers, self.workers_seed = workers, base_seed
        return workers

    def epoch(self, epoch: int, args: dict[str, Any]) -> None:
        with self.lock:
            if self.cancelled >= epoch:
                return
        settings = self.settings
        iterable = settings.kind == "iterable"
        if settings.persistent_workers:
            if self.kept is None:
                self.kept = Resources(settings.dataset, torch.get_num_threads())
            resources = self.kept
        else:
            resources = Resources(settings.dataset, torch.get_num_threads())
        share = _ShareOfWorkers(
            self.epoch_workers(int(args["base_seed"]), resources), self.index, settings.count, settings.num_workers
        )
        if settings.kind == "async" and not any(d is settings.dataset for d in resources.async_datasets):
            resources.async_datasets.append(settings.dataset)
        inbox = _EpochInbox(self, epoch)
        # Each epoch's graph records into its own policy: a call of an epoch that was stopped
        # (break) may still record when it ends, and its records are not this epoch's.
        settings._errors = ErrorPolicy(settings.on_error, None)
        share_bytes = settings.budget_share
        local_budget = _LocalBudget(ByteBudget(share_bytes)) if share_bytes is not None and not iterable else None
        with self.lock:
            self.budget = (epoch, local_budget) if local_budget is not None else None
        spec = EpochSpec(
            cast(Any, settings),
            resources,
            cast(Workers, share),
            False,
            None if iterable else inbox,
            args.get("resume"),
            local_budget.budget if local_budget is not None else None,
            worker_of=None if iterable else inbox.worker_of,
        )
        it: dp.NodeIterator[Any] | None = None
        try:
            graph = build_graph(spec, settings.kind, None)
            it = graph.open()
            with self.lock:
                self.current = (epoch, it)
                cancelled = self.cancelled >= epoch
            if cancelled:
                return
            self.serve(epoch, it, inbox if iterable else None, graph)
        finally:
            with self.lock:
                self.current = self.budget = None
            if local_budget is not None:
                local_budget.budget.close()
            if it is not None:
                it.shutdown(CHILD_JOIN_TIMEOUT, warn=False)
            if resources is not self.kept:
                resources.close(CHILD_JOIN_TIMEOUT, warn=False)

    def serve(self, epoch: int, it: dp.NodeIterator[Any], credits: _EpochInbox | None, graph: dp.Node[Any]) -> None:
        """Send each batch of the epoch's graph; with ``credits`` (an IterableDataset) one per
        credit the parent sent. The epoch's end carries the graph's ``stats()``."""
        while True:
            if credits is not None and not credits.credit():
                return
            try:
                tag, batch = next(it)
            except StopIteration:
                it.shutdown(CHILD_JOIN_TIMEOUT, warn=False)
                self.send(("end", epoch, graph.stats()))
                return
            except dp.EpochClosedError:
                return  # cancelled
            except Exception as exc:
                tag = tag_of(exc)
                self.send(("err", epoch, None if tag is NO_TAG else tag, pack_error(exc)))
                del exc
                continue
            self.send_result(epoch, tag, batch)
            del batch


class _LocalBudget:
    """A process's share of ``max_bytes_in_flight`` for one epoch: its ``ByteBudget`` over
    the batches of its share (numbered in the order they came), each given back when the
    parent hands it to the caller (a ``("taken", e, k)`` message, applied on the inbox
    thread). The batch needed next is the oldest not yet taken, always admitted."""

    def __init__(self, budget: ByteBudget) -> None:
        self.budget = budget
        self._lock = threading.Lock()
        self._taken = PositionLedger()  # guarded by _lock
        budget.needs(0)

    def taken(self, position: int) -> None:
        with self._lock:
            self._taken.add(position)
            frontier = self._taken.frontier
        self.budget.taken(position, frontier)


class _EpochInbox:
    """The items the parent sends for one epoch, in order, as the graph's sampler (map-style)
    or as credits (``IterableDataset``). Ends at the epoch's ``end`` or ``cancel``; a later
    epoch's message or ``exit`` ends it too and is left for the main loop."""

    def __init__(self, child: _Child, epoch: int) -> None:
        self._child = child
        self._epoch = epoch
        self._ended = False
        self._count = 0  # items handed to the graph: the graph's position of the next one
        self._slots: dict[int, int] = {}  # position -> the slot the parent named for it

    def __iter__(self) -> _EpochInbox:
        return self

    def __next__(self) -> Any:
        message = self._next()
        if message is None:
            raise StopIteration
        if len(message) > 3:
            self._slots[self._count] = int(message[3])
        self._count += 1
        return message[2]

    def worker_of(self, position: int) -> int:
        """The graph's ``worker_of``: the batch at this process's ``position`` is loaded by its
        thread ``slot % n``, the slot the parent named (``p // P`` for the epoch's position
        ``p``), else ``position % n``. Asked once per batch."""
        return self._slots.pop(position, position)

    def credit(self) -> bool:
        return self._next() is not None

    def _next(self) -> tuple[Any, ...] | None:
        if self._ended:
            return None
        child = self._child
        while True:
            message = child.queue.get()
            kind = message[0]
            if kind == "exit" or (kind == "epoch" and int(message[1]) > self._epoch):
                child.held = message
                break
            if len(message) > 1 and int(message[1]) != self._epoch:
                continue  # an earlier epoch's
            if kind == "item":
                return message
            if kind in ("end", "cancel"):
                break
        self._ended = True
        return None
