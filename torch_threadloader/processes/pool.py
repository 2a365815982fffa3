"""The loader's worker processes: :class:`WorkerProcesses` starts them (with their pipes),
keeps them across epochs and stops them within a bound; their lifecycle at ``close()``,
interpreter exit and ``os.fork()``.

Owner: the loader (its ``_Kept``), or an epoch that found them taken by another live epoch of
the same loader (it starts processes of its own and stops them when it ends).
"""

from __future__ import annotations

import itertools
import multiprocessing
import multiprocessing.connection
import os
import pickle
import threading
import warnings
import weakref
from multiprocessing.connection import Connection
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess

import torch.multiprocessing  # noqa: F401  (registers torch's shared-memory reductions)

import datapipes as dp
from datapipes._lifecycle import register_for_exit
from torch_threadloader.processes.child import child_main
from torch_threadloader.processes.errors import describe_exit
from torch_threadloader.processes.inputs import ChildInputs
from torch_threadloader.processes.messages import Exit, ToChild

__all__ = ["NAME", "PROCESS_EXIT_TIMEOUT", "ChildHandle", "WorkerProcesses"]

NAME = "threadloader-process"
#: Seconds ``close()`` waits for a child to exit after asking it to, before it kills it
#: (SIGKILL, never refused); also bounded by what is left of the caller's bound.
PROCESS_EXIT_TIMEOUT = 5.0
#: Every live ``WorkerProcesses`` (weakly): a forked child forgets their processes at once.
_live_pools: weakref.WeakSet[WorkerProcesses] = weakref.WeakSet()
#: What a forkserver imports once, so that each later process starts in about 0.1 s.
_FORKSERVER_PRELOAD = ["__main__", "torch_threadloader.processes.child"]


class ChildHandle:
    """The parent's side of one child: the process and its two pipes. ``send`` is locked:
    an epoch's consumer and a thread closing it may both send."""

    def __init__(self, index: int, process: BaseProcess, inbox: Connection, outbox: Connection) -> None:
        self.index = index
        self.process = process
        self.pid: int | None = process.pid
        self.inbox = inbox
        self.outbox = outbox
        # Re-entrant: garbage collection may end an old epoch (which sends "cancel") inside a
        # send on this thread; the message is pickled before any byte is written.
        self.send_lock = threading.RLock()
        self.failed = False  # its pipe broke or it was found dead

    def send(self, message: ToChild) -> bool:
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
        return f"{self.describe()} {describe_exit(self.process.exitcode)}"


class WorkerProcesses:
    """``count`` child processes that run a loader's graph (see ``processes.child``), started
    on first use and kept until :meth:`close`. Thread-safe.

    Owner: the process that made it. At its interpreter exit (``close()`` never called) the
    weak exit hook closes it within the hook's bound: "exit" to each child, then SIGKILL for
    one still running at the deadline, so a child that ignores SIGTERM (a dataset module's
    handler for graceful preemption) cannot hang the exit (``multiprocessing``'s own exit
    handler SIGTERMs its daemonic children and then waits for them without a bound). In an
    ``os.fork()`` child of the owner the processes are forgotten at the fork: nothing there
    sends to, signals or waits for them (not ``multiprocessing``'s exit handler either)."""

    def __init__(self, inputs: ChildInputs, count: int, context: BaseContext) -> None:
        self.inputs = inputs
        self.count = count
        self.context = context
        self.lock = threading.Lock()
        self.pid = os.getpid()
        self.children: list[ChildHandle | None] = [None] * count
        self.busy = False
        self.closed = False  # for good: a closed pool starts no child (its owner makes a new pool)
        self.retired = False  # closed when the epoch holding it lets it go (see retire)
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
        """The epoch holding these processes is done with them (a retired pool closes now)."""
        with self.lock:
            self.busy = False
            retired = self.retired
        if retired:
            self.close(PROCESS_EXIT_TIMEOUT)

    def retire(self) -> None:
        """No later epoch takes these processes (their owner made new ones, for settings that
        changed): closed now, or, while an epoch holds them, when it lets them go."""
        with self.lock:
            self.retired = True
            busy = self.busy
        if not busy:
            self.close(PROCESS_EXIT_TIMEOUT)

    def for_epoch(self) -> tuple[WorkerProcesses, WorkerProcesses | None]:
        """``(self, None)`` when an epoch takes these processes, else (another live epoch has
        them) ``(own, own)``: processes of the epoch's own, which it stops when it ends."""
        if self.acquire():
            return self, None
        own = WorkerProcesses(self.inputs, self.count, self.context)
        own.acquire()
        return own, own

    def started(self) -> list[ChildHandle]:
        """Every child, started now if it is not running (the first time, or in place of
        one that died). Raises a clear error for a dataset or function that cannot be pickled,
        and :class:`~datapipes.EpochClosedError` when :meth:`close` came first or meanwhile
        (from another thread): a child started then is stopped, not kept by a closed pool."""
        if self.pid != os.getpid():
            raise RuntimeError("a ThreadLoader's worker processes belong to the process that started them")
        with self.lock:
            self._refuse_closed()
            children = list(self.children)
        dead = [c for c in children if c is not None and not c.alive()]
        for child in dead:
            self._reap(child)
        out: list[ChildHandle] = []
        for i, old in enumerate(children):
            child = old if old is not None and old.alive() else self._start(i)
            if child is not old:
                self._keep(i, child)
            out.append(child)
        with self.lock:
            self._refuse_closed()  # closed meanwhile, with every child already running
        return out

    def _keep(self, index: int, child: ChildHandle) -> None:
        """Hold the started ``child``, unless a close() came since it started: then stop it."""
        with self.lock:
            closed = self.closed
            if not closed:
                self.children[index] = child
        if closed:
            _stop([child], PROCESS_EXIT_TIMEOUT, warn=True)
            self._refuse_closed()

    def _refuse_closed(self) -> None:
        if self.closed:
            raise dp.EpochClosedError("the loader's worker processes were closed (by another thread) as they started")

    def _start(self, index: int) -> ChildHandle:
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
        process = ctx.get_context().Process(  # the context itself (a default one: its start method)
            target=child_main,
            args=(index, self.inputs, inbox_r, outbox_w, close_here),
            name=f"{NAME}-{index}",
            daemon=True,
        )
        try:
            process.start()
        except Exception as exc:
            for conn in (inbox_r, inbox_w, outbox_r, outbox_w):
                conn.close()
            raise _pickling_error(self.inputs, exc) from exc
        finally:
            if process.pid is not None:
                inbox_r.close()
                outbox_w.close()
        return ChildHandle(index, process, inbox_w, outbox_r)

    def mark_dead(self, child: ChildHandle) -> None:
        child.failed = True

    def _reap(self, child: ChildHandle) -> None:
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
            self.closed = True
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


def _forget_process(process: BaseProcess) -> None:
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


def _stop(children: list[ChildHandle], timeout: float | None, *, warn: bool) -> None:
    for child in children:
        child.send(Exit())
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


def _pickling_error(inputs: ChildInputs, exc: BaseException) -> BaseException:
    """A clear error naming what could not be sent to the worker processes."""
    parts = (
        ("the dataset", inputs.dataset),
        ("collate_fn", inputs.collate_fn),
        ("worker_init_fn", inputs.worker_init_fn),
        ("on_error", inputs.on_error),
        ("sample_cost", inputs.sample_cost),
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
