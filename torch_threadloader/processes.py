"""``ThreadLoader(worker_processes=P)``: P persistent worker processes, each running the loader's
thread graph over its share of the batches.

The parent keeps everything that decides *what* is loaded, exactly as the in-process loader:
the sampler and its random draws, the base seed, the checkpoint record. It sends index batches
to the children (with ``in_order=True`` the batch at position ``j`` of the epoch to child
``j % P``, a resumed epoch's too), puts the results back in order, and hands them to the
epoch as ``(position, batch)``, as the thread
graph does, so ``state_dict()``, ``timeout`` and errors work as they do in process. Each child
(``process_child.py``) builds the same graph the loader builds in process, with
``max(num_workers, 1)`` threads: thread ``t`` of child ``c`` is worker ``t * P + c`` of
``P * max(num_workers, 1)``.

Bounds: a child holds at most ``max(num_workers, 1) * prefetch_factor`` batches in its graph
plus one being handed over; in all at most ``P * (max(num_workers, 1) * prefetch_factor + 1)``
batches are sent and not yet returned by ``next()``.

Owners: the loader owns its :class:`WorkerProcesses` (started at the first ``iter()``, kept
across epochs, stopped by ``close()``, Ctrl-C in ``next()`` or garbage collection of the
loader, and by multiprocessing's exit hook); a second live epoch of the same loader starts
processes of its own and stops them when it ends. The parent runs no thread for them: it waits
on the children's pipes and process sentinels with ``multiprocessing.connection.wait``.
"""

from __future__ import annotations

import itertools
import multiprocessing
import multiprocessing.connection
import os
import pickle
import signal
import threading
import warnings
import weakref
from collections import deque
from collections.abc import Callable, Iterable
from multiprocessing.connection import Connection
from multiprocessing.context import BaseContext
from typing import Any

import torch.multiprocessing  # noqa: F401  (registers torch's shared-memory reductions)

import datapipes as dp
from datapipes._lifecycle import register_for_exit
from torch_threadloader.budget import BudgetTotals
from torch_threadloader.pipeline_stats import LoaderStats
from torch_threadloader.process_child import ChildSettings, child_main, unpack_error
from torch_threadloader.resume import sampler_resume, tag_error
from torch_threadloader.skip import ErrorPolicy, TooManyErrors

__all__ = [
    "PROCESS_EXIT_TIMEOUT",
    "ProcessGraph",
    "WorkerProcessError",
    "WorkerProcesses",
    "check_process_affinity",
    "check_process_nice",
    "check_worker_processes",
    "process_graph",
    "resolve_context",
]

NAME = "threadloader-process"
#: Seconds ``close()`` waits for a child to exit after asking it to, before it kills it
#: (SIGKILL, never refused); also bounded by what is left of the caller's bound.
PROCESS_EXIT_TIMEOUT = 5.0
#: Seconds a complete epoch waits, in all, for the children's ends (and their stats).
END_WAIT = 1.0
#: Every live ``WorkerProcesses`` (weakly): a forked child forgets their processes at once.
_live_pools: weakref.WeakSet[WorkerProcesses] = weakref.WeakSet()
_FORKSERVER_PRELOAD = ["__main__", "torch_threadloader.process_child"]


class WorkerProcessError(dp.WorkerLostError):
    """A worker process ended while it held batches of the epoch (killed, a crash in a C
    extension, ``os._exit``): raised by ``next()``, naming the process, how it ended and the
    first batch it lost. The epoch ends there (its next ``next()`` raises ``StopIteration``);
    the next ``iter()`` starts a new process in its place. The worker-process form of
    :class:`datapipes.WorkerLostError` (``worker`` names the process); survives ``pickle``."""

    def __init__(
        self, message: str, *, process: int, pid: int | None, exitcode: int | None, worker: str | None = None
    ) -> None:
        self.process = process
        self.pid = pid
        self.exitcode = exitcode
        super().__init__(message, worker=worker if worker is not None else f"worker process {process} (pid {pid})")


def check_worker_processes(worker_processes: Any) -> int:
    """``worker_processes`` as given, refused with an error naming it unless a non-negative int."""
    if isinstance(worker_processes, bool) or not isinstance(worker_processes, int):
        raise TypeError(
            f"worker_processes must be a non-negative int, got {worker_processes!r} ({type(worker_processes).__name__})"
        )
    if worker_processes < 0:
        raise ValueError(f"worker_processes must be a non-negative int (0: no processes), got {worker_processes!r}")
    return worker_processes


def check_process_nice(process_nice: Any, worker_processes: int) -> int:
    """``process_nice`` as given: an int from 0 to 19 (raising a priority needs privileges),
    and only with worker processes (a thread's priority in the training process would make
    the training step wait on it for the GIL: see ``docs/processes.md``)."""
    if isinstance(process_nice, bool) or not isinstance(process_nice, int) or not 0 <= process_nice <= 19:
        raise ValueError(f"process_nice must be an int from 0 to 19, got {process_nice!r}")
    if process_nice and not worker_processes:
        raise ValueError("process_nice applies to worker processes: set worker_processes=P, or leave it 0")
    return process_nice


def check_process_affinity(affinity: Any, worker_processes: int) -> tuple[frozenset[int], ...] | None:
    """``process_affinity`` as the CPU set of each worker process: ``None`` (the loader's
    process's set, inherited), CPU numbers (every process on those), or one collection of
    CPU numbers per process. Refused, naming the argument, without worker processes, where
    the OS has no ``sched_setaffinity`` (Linux has it), or for CPUs this process may not use."""
    if affinity is None:
        return None
    if not worker_processes:
        raise ValueError("process_affinity applies to worker processes: set worker_processes=P, or leave it None")
    if not hasattr(os, "sched_setaffinity"):
        raise ValueError("process_affinity needs os.sched_setaffinity (Linux); leave it None here")
    if isinstance(affinity, str | bytes) or not isinstance(affinity, Iterable):
        raise TypeError(
            f"process_affinity must be CPU numbers, or one collection of them per process, got {affinity!r}"
        )
    items = list(affinity)
    per_process = bool(items) and all(isinstance(x, Iterable) and not isinstance(x, str | bytes) for x in items)
    sets = [list(x) for x in items] if per_process else [items] * worker_processes
    if per_process and len(sets) != worker_processes:
        raise ValueError(
            f"process_affinity has {len(sets)} CPU sets for worker_processes={worker_processes}: give one per "
            "process, or one set of CPU numbers for all"
        )
    out = []
    for i, cpus in enumerate(sets):
        if not cpus or any(isinstance(c, bool) or not isinstance(c, int) or c < 0 for c in cpus):
            raise ValueError(
                f"process_affinity: the CPU set of process {i} must be a non-empty set of ints >= 0, got {cpus!r}"
            )
        out.append(frozenset(cpus))
    missing = _cpus_refused(frozenset().union(*out))
    if missing:
        raise ValueError(
            f"process_affinity: CPUs {missing} are not available to this process (its cpuset refuses them)"
        )
    return tuple(out)


def _cpus_refused(cpus: frozenset[int]) -> list[int]:
    """The CPUs a thread of this process may not run on: each is tried by a short-lived
    thread on itself (the calling thread's own set may be narrower than the process's, e.g.
    a training thread pinned to one CPU, and it is left as it is)."""
    refused: list[int] = []

    def probe() -> None:
        for cpu in sorted(cpus):
            try:
                os.sched_setaffinity(0, {cpu})
            except OSError:
                refused.append(cpu)

    thread = threading.Thread(target=probe, name="threadloader-affinity-probe")
    thread.start()
    thread.join()
    return refused


def resolve_context(context: Any) -> BaseContext:
    """The start method: ``None`` is forkserver where available (else spawn); a name or a
    context object as torch's ``multiprocessing_context`` takes them."""
    if context is None:
        methods = multiprocessing.get_all_start_methods()
        return multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    if isinstance(context, str):
        if context not in multiprocessing.get_all_start_methods():
            raise ValueError(
                f"multiprocessing_context={context!r} is not a start method here; "
                f"choose one of {multiprocessing.get_all_start_methods()}"
            )
        return multiprocessing.get_context(context)
    if isinstance(context, BaseContext):
        return context
    raise TypeError(
        f"multiprocessing_context must be a start method name or a multiprocessing context, got {type(context).__name__}"
    )


def _describe_exit(exitcode: int | None) -> str:
    if exitcode is None:
        return "stopped answering"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"was killed by {name}"
    if exitcode == 1:  # an uncaught exception: Python printed it
        return (
            "exited with code 1 (its traceback is on stderr; a dataset class defined in an interactive "
            "__main__, such as a notebook's, cannot be imported by a worker process)"
        )
    return f"exited with code {exitcode}"


class _ChildHandle:
    """The parent's side of one child: the process and its two pipes. ``send`` is locked:
    an epoch's consumer and a thread closing it may both send."""

    def __init__(self, index: int, process: Any, inbox: Connection, outbox: Connection) -> None:
        self.index = index
        self.process = process
        self.pid: int | None = process.pid
        self.inbox = inbox
        self.outbox = outbox
        # Re-entrant: garbage collection may end an old epoch (which sends "cancel") inside a
        # send on this thread; the message is pickled before any byte is written.
        self.send_lock = threading.RLock()
        self.failed = False  # its pipe broke or it was found dead

    def send(self, message: tuple[Any, ...]) -> bool:
        """False when the child is gone (its pipe is closed)."""
        with self.send_lock:
            try:
                self.inbox.send(message)
                return True
            except (OSError, ValueError):
                self.failed = True
                return False

    def alive(self) -> bool:
        return not self.failed and self.process.is_alive()

    def describe(self) -> str:
        return f"worker process {self.index} (pid {self.pid}, {self.process.name})"

    def death(self) -> str:
        self.process.join(0.1)  # reaped by now in the common case; a bounded wait otherwise
        return f"{self.describe()} {_describe_exit(self.process.exitcode)}"


class WorkerProcesses:
    """``count`` child processes that run a loader's graph (see ``process_child``), started
    on first use and kept until :meth:`close`. Thread-safe.

    Owner: the process that made it. At its interpreter exit (``close()`` never called) the
    weak exit hook closes it within the hook's bound: "exit" to each child, then SIGKILL for
    one still running at the deadline, so a child that ignores SIGTERM (a dataset module's
    handler for graceful preemption) cannot hang the exit (``multiprocessing``'s own exit
    handler SIGTERMs its daemonic children and then waits for them without a bound). In an
    ``os.fork()`` child of the owner the processes are forgotten at the fork: nothing there
    sends to, signals or waits for them (not ``multiprocessing``'s exit handler either)."""

    def __init__(self, settings: ChildSettings, count: int, context: BaseContext) -> None:
        self.settings = settings
        self.count = count
        self.context = context
        self.lock = threading.Lock()
        self.pid = os.getpid()
        self.children: list[_ChildHandle | None] = [None] * count
        self.busy = False
        self.epochs = itertools.count()
        _live_pools.add(self)
        register_for_exit(self)

    def acquire(self) -> bool:
        """Take the processes for one epoch; False when another live epoch has them."""
        with self.lock:
            if self.busy:
                return False
            self.busy = True
            return True

    def release(self) -> None:
        with self.lock:
            self.busy = False

    def started(self) -> list[_ChildHandle]:
        """Every child, started now if it is not running (the first time, or in place of
        one that died). Raises a clear error for a dataset or function that cannot be pickled."""
        if self.pid != os.getpid():
            raise RuntimeError("a ThreadLoader's worker processes belong to the process that started them")
        with self.lock:
            children = list(self.children)
        dead = [c for c in children if c is not None and not c.alive()]
        for child in dead:
            self._reap(child)
        out: list[_ChildHandle] = []
        for i, old in enumerate(children):
            child = old if old is not None and old.alive() else self._start(i)
            if child is not old:
                with self.lock:
                    self.children[i] = child
            out.append(child)
        return out

    def _start(self, index: int) -> _ChildHandle:
        ctx = self.context
        if ctx.get_start_method() == "fork" and threading.active_count() > 1:
            names = sorted(t.name for t in threading.enumerate() if t is not threading.current_thread())
            raise RuntimeError(
                f"multiprocessing_context='fork' with threads running ({', '.join(names)}): a forked child "
                "would inherit locks those threads hold; use 'forkserver' or 'spawn' (the default)"
            )
        if ctx.get_start_method() == "forkserver":
            with _preload_lock:
                global _preload_set
                if not _preload_set:
                    ctx.set_forkserver_preload(_FORKSERVER_PRELOAD)
                    _preload_set = True
        inbox_r, inbox_w = ctx.Pipe(duplex=False)
        outbox_r, outbox_w = ctx.Pipe(duplex=False)
        close_here: list[Connection] = []
        if ctx.get_start_method() == "fork":
            # The fork copies every descriptor: the child must close the parent's ends (its
            # own included), or it would never see its inbox end when the parent dies.
            close_here = [inbox_w, outbox_r]
            with self.lock:
                for other in self.children:
                    if other is not None:
                        close_here += [other.inbox, other.outbox]
        process = ctx.Process(  # type: ignore[attr-defined]
            target=child_main,
            args=(index, self.settings, inbox_r, outbox_w, close_here),
            name=f"{NAME}-{index}",
            daemon=True,
        )
        try:
            process.start()
        except Exception as exc:
            for conn in (inbox_r, inbox_w, outbox_r, outbox_w):
                conn.close()
            raise _pickling_error(self.settings, exc) from exc
        finally:
            if process.pid is not None:
                inbox_r.close()
                outbox_w.close()
        return _ChildHandle(index, process, inbox_w, outbox_r)

    def mark_dead(self, child: _ChildHandle) -> None:
        child.failed = True

    def _reap(self, child: _ChildHandle) -> None:
        _stop([child], 0.0, warn=False)
        with self.lock:
            if self.children[child.index] is child:
                self.children[child.index] = None

    def close(self, timeout: float | None, *, warn: bool = True) -> None:
        """Ask every child to exit, wait at most ``min(timeout, PROCESS_EXIT_TIMEOUT)``, then
        kill the ones still running; idempotent. In a forked child of the owner: forget them."""
        if self.pid != os.getpid():
            self.forget_after_fork()
            return
        with self.lock:
            children = [c for c in self.children if c is not None]
            self.children = [None] * self.count
            self.busy = False
        if children:
            _stop(children, timeout, warn=warn)

    def shutdown(self, timeout: float | None = PROCESS_EXIT_TIMEOUT) -> None:
        """The exit hook's call (``datapipes``' weak exit hook): :meth:`close` within ``timeout``."""
        self.close(timeout, warn=False)

    def forget_after_fork(self) -> None:
        """In a forked child of the owner: drop the processes without a word to them, and
        take them out of ``multiprocessing``'s children of this process (whose exit handler
        would SIGTERM and join them). Lock-free: a thread may have held the lock at the fork."""
        children, self.children = [c for c in self.children if c is not None], [None] * self.count
        self.busy = False
        for child in children:
            child.failed = True
            _forget_process(child.process)


def _forget_process(process: Any) -> None:
    # multiprocessing has no public way to disown a child; its registry of this process's
    # children is ``multiprocessing.process._children`` (a set), inherited by a plain fork.
    registry = getattr(multiprocessing.process, "_children", None)
    if isinstance(registry, set):
        registry.discard(process)


def _forget_after_fork() -> None:
    for pool in list(_live_pools):
        pool.forget_after_fork()


os.register_at_fork(after_in_child=_forget_after_fork)


_preload_lock = threading.Lock()
_preload_set = False


def _stop(children: list[_ChildHandle], timeout: float | None, *, warn: bool) -> None:
    for child in children:
        child.send(("exit",))
        with child.send_lock:
            child.inbox.close()
    bound = PROCESS_EXIT_TIMEOUT if timeout is None else min(timeout, PROCESS_EXIT_TIMEOUT)
    deadline = dp.Deadline(bound)
    multiprocessing.connection.wait([c.process.sentinel for c in children], deadline.remaining())
    killed = []
    for child in children:
        child.process.join(deadline.remaining())
        if child.process.exitcode is None:
            child.process.kill()
            child.process.join(PROCESS_EXIT_TIMEOUT)  # SIGKILL cannot be refused
            killed.append(child.describe())
        child.outbox.close()
    if warn and killed:
        warnings.warn(
            f"{', '.join(killed)} did not exit within {bound}s of close(); killed",
            RuntimeWarning,
            stacklevel=3,
        )


def _pickling_error(settings: ChildSettings, exc: BaseException) -> BaseException:
    """A clear error naming what could not be sent to the worker processes."""
    parts = (
        ("the dataset", settings.dataset),
        ("collate_fn", settings.collate_fn),
        ("worker_init_fn", settings.worker_init_fn),
        ("on_error", settings.on_error),
    )
    for what, obj in parts:
        try:
            pickle.dumps(obj)
        except Exception as cause:
            name = type(obj).__name__ if what == "the dataset" else getattr(obj, "__qualname__", repr(obj))
            return TypeError(
                f"worker_processes: {what} ({name}) cannot be pickled to send it to the worker processes: {cause}. "
                "Define it at module level (importable by the child), keep no open files, locks or sessions "
                "in it (open them lazily, in the worker), or use worker_processes=0"
            )
    return exc


class ProcessGraph(dp.Node[Any]):
    """The epoch's graph in the loader's process when the work runs in worker processes: it
    yields ``(tag, batch)`` as the in-process graph does (``tag`` the batch's position in the
    epoch for map-style and async datasets, ``(worker, state, ended)`` for an
    ``IterableDataset``), from the children of ``pool`` (or of processes it starts for itself,
    when another live epoch holds the pool). ``source`` is the epoch's ``Sampler`` (with
    positions) for a map-style dataset, ``None`` for an ``IterableDataset``."""

    def __init__(
        self,
        source: dp.Node[Any] | None,
        pool: WorkerProcesses,
        *,
        base_seed: int,
        resume: dict[str, Any] | None,
        timeout: float | None,
        finish: Callable[[Any], Any] | None,
        loader_stats: LoaderStats | None = None,
        policy: ErrorPolicy | None = None,
        budget: BudgetTotals | None = None,
    ) -> None:
        super().__init__(source, name=NAME)
        self.budget = budget  # max_bytes_in_flight: split between the children; their totals
        self.loader_stats = loader_stats  # stats=True: the children's stats are merged into it
        self.policy = policy  # on_error: the children's skip records are added to it
        self.pool = pool
        self.base_seed = base_seed
        self.resume = resume
        self.timeout = timeout
        self.finish = finish
        self._children_lock = threading.Lock()
        self._children_stats: list[dict[str, Any]] = [{} for _ in range(pool.count)]

    def stats(self) -> dict[str, Any]:
        """This node's counters, its sampler's under ``"source"``, and under ``"processes"``
        each worker process's graph ``stats()`` for the epoch (``{}`` until its share ended)."""
        out = super().stats()
        with self._children_lock:
            out["processes"] = [dict(s) for s in self._children_stats]
        return out

    def child_stats(self, index: int, stats: dict[str, Any]) -> None:
        with self._children_lock:
            self._children_stats[index] = stats

    def _open(self, state: dp.StateDict | None) -> dp.NodeIterator[Any]:
        return _ProcessEpoch(self, state)


_ERR = "err"  # a result that is an error (else "ok")


class _ProcessEpoch(dp.NodeIterator[Any]):
    """One epoch over the worker processes. The consumer's thread owns the dispatch, the
    reorder buffer and the receiving ends; ``shutdown`` may come from another thread (it only
    sends, under each child's lock, and wakes a waiting ``next()``)."""

    def __init__(self, node: ProcessGraph, state: dp.StateDict | None) -> None:
        self._node = node
        self._stats = node._stats
        self._lock = threading.Lock()
        self._closed = False
        self._pid = os.getpid()
        self._timeout = node.timeout
        self._finish = node.finish
        settings = node.pool.settings
        self._iterable = settings.kind == "iterable"
        self._in_order = bool(settings.in_order)
        pool = node.pool
        self._own_pool: WorkerProcesses | None = None
        if not pool.acquire():
            pool = self._own_pool = WorkerProcesses(settings, pool.count, pool.context)
            pool.acquire()
        self._pool = pool
        self._wake_r, self._wake_w = multiprocessing.Pipe(duplex=False)
        self._source: dp.NodeIterator[Any] | None = None
        try:
            self._children = pool.started()
            self._epoch = next(pool.epochs)
            if node.source is not None:
                self._source = node._open_source(state)
        except BaseException:
            self._release()
            raise
        p = self._p = len(self._children)
        self._per_child = settings.capacity + 1  # a child's graph pulls one more before it hands one over
        self._bound = p * self._per_child
        # Owned by the consumer's thread:
        self._sent = 0  # items dispatched this epoch (j)
        self._yielded = 0  # results handed out (map-style: items; iterable: batches)
        self._in_hand = [0] * p  # per child: sent, not yet received
        self._local: list[dict[int, int]] = [{} for _ in range(p)]  # per child: local number -> j
        self._next_local = [0] * p
        self._items: dict[int, tuple[int, Any]] = {}  # j -> (position, indices), until yielded
        self._ready: dict[int, tuple[str, Any, Any, int]] = {}  # in order: j -> (kind, tag, value, child)
        self._fifo: list[deque[tuple[str, Any, Any, int]]] = [deque() for _ in range(p)]  # iterable, in order
        self._any: deque[tuple[str, Any, Any, int]] = deque()  # in_order=False
        self._ended = [False] * p  # iterable: the child's share ended
        self._dead: list[str | None] = [None] * p
        self._too_many: dict[int | None, TooManyErrors] = {}  # j (None: unknown) -> the error its batch raises
        self._local_of: dict[int, int] = {}  # max_bytes_in_flight: j -> its number in its child's share
        self._exhausted = False
        self._end_sent = False
        resume = node.resume
        # IterableDataset, in order: whose turn it is (a worker of all P * n), and which have ended.
        self._turn = 0
        self._active = [True] * settings.total_workers
        args: list[dict[str, Any]] = [{"base_seed": node.base_seed} for _ in range(p)]
        if self._iterable:
            total = settings.total_workers
            turn = int(resume["turn"]) if resume is not None else 0
            self._turn = turn
            for c in range(p):
                first = turn + ((c - turn) % p)
                if first >= total:
                    first -= total
                if resume is not None:
                    workers = resume["workers"]
                    args[c]["resume"] = {
                        "workers": [workers[t * p + c] for t in range(settings.num_workers)],
                        "turn": first // p,
                    }
        try:
            for c, child in enumerate(self._children):
                if not child.send(("epoch", self._epoch, args[c])):
                    self._dead[c] = child.death()
            if self._iterable:
                for c, child in enumerate(self._children):
                    for _ in range(settings.capacity):
                        child.send(("item", self._epoch, None))
                    self._in_hand[c] = settings.capacity
            else:
                self._dispatch()
        except BaseException:
            self.shutdown(0, warn=False)
            raise

    # -- dispatch (map-style) ----------------------------------------------------------------
    def _dispatch(self) -> None:
        source = self._source
        if source is None or self._exhausted:
            return
        p = self._p
        while self._sent - self._yielded < self._bound:
            if not self._in_order:
                c = min(range(p), key=lambda i: self._in_hand[i])
                if self._in_hand[c] >= self._per_child:
                    return
            try:
                position, indices = next(source)
            except StopIteration:
                self._exhausted = True
                break
            message: tuple[Any, ...] = ("item", self._epoch, indices)
            if self._in_order:
                # Batch p is worker p % W's, in a resumed epoch too (its positions start past 0
                # and may skip some): process p % P, which gives it to its thread (p // P) % n.
                c = position % p
                message += (position // p,)
            j = self._sent
            self._sent += 1
            self._items[j] = (position, indices)
            k = self._next_local[c]
            self._next_local[c] = k + 1
            self._local[c][k] = j
            self._in_hand[c] += 1
            if self._dead[c] is None and not self._children[c].send(message):
                self._dead[c] = self._children[c].death()
        if self._exhausted and not self._end_sent:
            self._end_sent = True
            for child in self._children:
                child.send(("end", self._epoch))

    # -- receiving -------------------------------------------------------------------------------
    def _receive(self, c: int, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if len(message) < 2:
            return
        current = message[1] == self._epoch
        if len(message) >= 4 and message[-1] is not None:
            self._news(c, message[-1], current)
        if not current:
            return  # an earlier epoch's
        if kind == "end":
            self._ended[c] = True
            if len(message) > 2 and isinstance(message[2], dict):
                self._node.child_stats(c, message[2])
            return
        tag, value = message[2], message[3]
        self._in_hand[c] -= 1
        if self._iterable:
            entry = (kind, tag, value, c)
            (self._fifo[c] if self._in_order else self._any).append(entry)
            return
        local = self._local[c]
        k = tag if isinstance(tag, int) and tag in local else min(local)  # untagged: its oldest, in order
        j = local.pop(k)
        if self._node.budget is not None:
            self._local_of[j] = k
        entry = (kind, j, value, c)
        if self._in_order:
            self._ready[j] = entry
        else:
            self._any.append(entry)

    def _news(self, c: int, news: dict[str, Any], current: bool) -> None:
        """Child ``c``'s stats since its last message (merged into the loader's, an earlier
        epoch's too: the work was done) and the samples it skipped (this epoch's: recorded
        with their batch's place in the epoch; one past ``max_errors`` fails its batch)."""
        budget = news.get("budget")
        if budget is not None and self._node.budget is not None and current:
            self._node.budget.update(c, *budget)
        delta = news.get("stats")
        stats = self._node.loader_stats
        if delta is not None and stats is not None:
            stats.merge(delta)
        policy = self._node.policy
        records = news.get("errors")
        if not records or policy is None or not current:
            return
        for record in records:
            j = self._local[c].get(record.get("batch"))
            record["batch"] = self._items[j][0] if j is not None and j in self._items else None
            too_many = policy.add([record])
            if too_many is not None:
                self._too_many.setdefault(j, too_many)

    def _drain(self, c: int) -> bool:
        """Read every message child ``c`` has sent; False when its pipe ended."""
        conn = self._children[c].outbox
        try:
            while conn.poll():
                self._receive(c, conn.recv())
        except (EOFError, OSError):
            return False
        return True

    def _wait(self, deadline: dp.Deadline | None) -> None:
        with self._lock:
            closed = self._closed
        if closed:  # by another thread, which may be stopping the processes too
            raise dp.EpochClosedError(f"{NAME}: the epoch was closed by another thread while next() waited")
        waits: list[Any] = [self._wake_r]
        for c, child in enumerate(self._children):
            if self._dead[c] is None:
                waits += [child.outbox, child.process.sentinel]
        remaining = None if deadline is None else deadline.remaining()
        ready = multiprocessing.connection.wait(waits, remaining)
        if not ready:
            raise self._timeout_error()
        if self._wake_r in ready:
            raise dp.EpochClosedError(f"{NAME}: the epoch was closed by another thread while next() waited")
        for c, child in enumerate(self._children):
            if self._dead[c] is not None:
                continue
            pipe_open = self._drain(c) if child.outbox in ready else True
            if not pipe_open or child.process.sentinel in ready:
                # It ended: what it sent before is still in the pipe, and is handed out first.
                self._drain(c)
                self._dead[c] = child.death()
                self._pool.mark_dead(child)

    def _wait_ends(self) -> None:
        """The epoch is complete: take each child's end (it carries its graph's stats), within
        ``END_WAIT`` seconds in all (they come right after the last batch)."""
        deadline = dp.Deadline(END_WAIT)
        while True:
            pending = [c for c in range(self._p) if not self._ended[c] and self._dead[c] is None]
            remaining = deadline.remaining()
            if not pending or not remaining:
                return
            conns = [self._children[c].outbox for c in pending]
            ready = multiprocessing.connection.wait(conns, remaining)
            for c in pending:
                if self._children[c].outbox in ready and not self._drain(c):
                    self._ended[c] = True

    def _timeout_error(self) -> dp.NodeTimeoutError:
        if self._iterable:
            return dp.NodeTimeoutError(NAME, self._yielded, None, self._timeout)
        j = self._yielded if self._in_order else min(self._items, default=self._sent)
        return dp.NodeTimeoutError(NAME, j, self._items.get(j), self._timeout)

    # -- handing out -----------------------------------------------------------------------------
    def _take(self) -> tuple[str, Any, Any, int] | None:
        """The next result to hand out, or None; raises for a dead child that holds it."""
        if self._iterable:
            if not self._in_order:
                if self._any:
                    return self._any.popleft()
                self._check_dead_any()
                return None
            return self._take_in_turn()
        if self._in_order:
            j = self._yielded
            entry = self._ready.pop(j, None)
            if entry is None and j < self._sent:
                c = self._items[j][0] % self._p  # the process its position went to
                if self._dead[c] is not None:
                    self._fail(c, j)
            return entry
        if self._any:
            return self._any.popleft()
        self._check_dead_any()
        return None

    def _take_in_turn(self) -> tuple[str, Any, Any, int] | None:
        """IterableDataset, in order: the next batch of the next worker still active, round
        robin over all ``P * n`` workers, as in one process. A process's batches come in its
        own round-robin order, so when its next batch is not from the worker whose turn it is,
        that worker's share has ended (in one process the same turn is passed over)."""
        p, active = self._p, self._active
        total = len(active)
        for _ in range(total):
            w = self._turn
            c, t = w % p, w // p
            fifo = self._fifo[c]
            if active[w] and fifo:
                entry = fifo[0]
                tag = entry[1]
                if tag is None or int(tag[0]) == t:
                    fifo.popleft()
                    self._turn = (w + 1) % total
                    return entry
                active[w] = False
            elif active[w] and self._ended[c]:
                active[w] = False
            elif active[w]:
                if self._dead[c] is not None:
                    self._fail(c, None)
                return None
            self._turn = (w + 1) % total
        return None

    def _check_dead_any(self) -> None:
        """Out of order, nothing ready: raise for a dead child that held batches."""
        for c, dead in enumerate(self._dead):
            if dead is not None and (self._in_hand[c] > 0 or (self._iterable and not self._ended[c])):
                lost = min(self._local[c].values(), default=None)
                self._fail(c, lost)
        return None

    def _fail(self, c: int, j: int | None) -> None:
        with self._lock:
            closed = self._closed
        if closed:  # closed by another thread (the loader's close() also stops the processes)
            raise dp.EpochClosedError(f"{NAME}: the epoch was closed by another thread while next() waited")
        child = self._children[c]
        where = ""
        if j is not None and j in self._items:
            position, indices = self._items[j]
            where = f" while it held batch {position} (indices {indices!r})"
        message = f"{self._dead[c]}{where}; the epoch cannot go on without its batches"
        self.shutdown(0, warn=False)
        raise WorkerProcessError(
            message, process=c, pid=child.pid, exitcode=child.process.exitcode, worker=child.describe()
        )

    def _finished(self) -> bool:
        if self._iterable:
            return all(self._ended[c] and not self._fifo[c] for c in range(self._p)) and not self._any
        return self._exhausted and self._yielded >= self._sent

    def __next__(self) -> Any:
        with self._lock:
            if self._closed:
                raise StopIteration
        deadline = None if self._timeout is None else dp.Deadline(self._timeout)
        while True:
            entry = self._take()
            if entry is not None:
                return self._hand_out(entry)
            if self._finished():
                self._wait_ends()
                self.close()
                raise StopIteration
            self._wait(deadline)

    def _hand_out(self, entry: tuple[str, Any, Any, int]) -> Any:
        kind, tag, value, c = entry
        self._yielded += 1
        child = self._children[c]
        if self._iterable:
            if not self._ended[c] and self._dead[c] is None:
                self._in_hand[c] += 1  # one more credit: the child may send one more batch
                child.send(("item", self._epoch, None))
            if tag is not None:  # (its worker in that process, state, ended[, items]): the worker's number here
                worker, *rest = tag
                tag = (int(worker) * self._p + c, *rest)
        else:
            k = self._local_of.pop(tag, None)
            if k is not None and self._dead[c] is None:  # its bytes are the caller's now
                child.send(("taken", self._epoch, k))
            too_many = self._too_many.pop(tag, None) or self._too_many.pop(None, None)
            tag = self._items.pop(tag)[0]  # the batch's position in the epoch
            self._dispatch()
            if too_many is not None:  # as in one process: the batch that crossed the limit raises it
                self._stats.add(items_out=1)
                tag_error(too_many, tag)
                cause = unpack_error(value) if kind == _ERR else None  # e.g. every sample of it failed
                del value, entry
                raise too_many from cause
        self._stats.add(items_out=1)
        if kind == _ERR:
            exc = unpack_error(value)
            where = f" for batch {tag}" if not self._iterable else f" for worker {tag[0]}'s batch" if tag else ""
            exc.add_note(f"[torch_threadloader] raised in {child.describe()}{where}; there:\n{value[3]}")
            if tag is not None:
                tag_error(exc, tag)
            del value, entry
            raise exc
        if self._finish is not None:
            try:
                value = self._finish(value)
            except BaseException as exc:
                tag_error(exc, tag)
                raise
        return tag, value

    # -- state and close -------------------------------------------------------------------------
    def state_dict(self) -> dp.StateDict:
        if self._source is None:
            return {}
        return {"source": self._source.state_dict()}

    def close(self) -> None:
        self.shutdown()

    def shutdown(self, timeout: float | None = dp.DEFAULT_JOIN_TIMEOUT, *, warn: bool = True) -> bool:
        """End the epoch: the children stop its work (their processes stay for the next
        epoch, unless this epoch started its own). Returns at once, but for processes the
        epoch started itself (stopped within ``timeout``). In a forked child of the process
        that opened it, only forgets it: the epoch, its pipes and its processes are the parent's."""
        if self._pid != os.getpid():
            self._closed = True
            return True
        with self._lock:
            if self._closed:
                return True
            self._closed = True
        for child in self._children:
            child.send(("cancel", self._epoch))
        try:
            self._wake_w.send_bytes(b"")
        except OSError:
            pass
        if self._source is not None:
            self._source.close()
        self._release(timeout, warn=warn)
        return True

    def _release(self, timeout: float | None = 0, *, warn: bool = False) -> None:
        if self._own_pool is not None:
            self._own_pool.close(timeout, warn=warn)
        else:
            self._pool.release()


def process_graph(spec: Any, kind: str, base_seed: int) -> dp.Node[Any]:
    """The epoch's graph for a loader with ``worker_processes > 0`` (``spec``: its
    ``graph.EpochSpec``): the loader's processes (started at its first ``iter()``) fed from
    the epoch's sampler, resumed where ``spec.resume`` says."""
    loader = spec.loader
    kept = loader._kept
    with kept.lock:
        pool = kept.processes
        if pool is None or pool.pid != os.getpid():  # none yet, or the parent's, in a forked child
            count = loader.worker_processes
            pool = kept.processes = WorkerProcesses(ChildSettings(loader, count), count, loader._mp_context)
    resume = spec.resume
    source = None if kind == "iterable" else dp.Sampler(sampler=spec.indices, positions=True)
    graph = ProcessGraph(
        source,
        pool,
        base_seed=base_seed,
        resume=resume if kind == "iterable" else None,
        timeout=float(loader.timeout) or None,
        finish=spec.finish,
        loader_stats=loader._stats,
        policy=loader._errors if loader._errors.skips else None,
        budget=loader._last_budget if isinstance(loader._last_budget, BudgetTotals) else None,
    )
    if source is not None and resume is not None:  # the sampler passes over the delivered positions
        graph.load_state_dict({"source": sampler_resume(resume)})
    return graph
