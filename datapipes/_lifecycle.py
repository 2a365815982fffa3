"""Thread ownership: named daemon threads, bounded joins, and one weak exit hook.

Worker threads are daemons so that interpreter shutdown never waits on a worker that is
blocked on a full buffer; instead, the exit hook below stops every run still alive, in the
order the runs were started, newest first (a run opens its sources before it registers, so
a consumer is stopped before the nodes it pulls from). The hook keeps only weak references,
so it never keeps a run (or the pipeline behind it) alive, and it waits a bounded time.

The ``weakref.finalize`` objects that stop a run when its owner is garbage-collected are
made with ``atexit = False``: at exit this hook, with its shorter timeout, does their work.
"""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import functools
import itertools
import os
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, Protocol, TypeVar

__all__ = [
    "DEFAULT_JOIN_TIMEOUT",
    "EXIT_JOIN_TIMEOUT",
    "INTERRUPT_JOIN_TIMEOUT",
    "Deadline",
    "Stoppable",
    "call_deadline",
    "pull_deadline",
    "WeakRegistry",
    "close_source",
    "in_forked_child",
    "join_threads",
    "register_for_exit",
    "start_thread",
    "track_thread",
    "tracked_threads",
    "warn_stuck",
]

_T = TypeVar("_T")

#: Seconds ``close()`` waits for a worker to finish the call it is in before it warns.
DEFAULT_JOIN_TIMEOUT = 30.0


class Stoppable(Protocol):
    def shutdown(self, timeout: float | None = None) -> object: ...


#: Seconds the exit hook waits, in all, for the runs still alive at interpreter exit.
EXIT_JOIN_TIMEOUT = 5.0

#: Seconds a Ctrl-C in ``next()`` waits for workers before it propagates.
INTERRUPT_JOIN_TIMEOUT = 0.5

_pid = os.getpid()


def _after_fork_in_child() -> None:
    # The child has none of the parent's threads: every object made before the fork that
    # owns threads is dead here. Owners compare their creation pid with in_forked_child().
    global _pid, _registry_lock
    _pid = os.getpid()
    _registry_lock = threading.Lock()  # another thread may have held it at the fork
    _registry.clear()
    _threads.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def in_forked_child(pid: int) -> bool:
    """True when the calling process is not ``pid``: an object made there lost its threads."""
    return pid != _pid


class Deadline:
    """One time bound shared by several waits, so that their timeouts do not add up."""

    __slots__ = ("_end",)

    def __init__(self, timeout: float | None) -> None:
        self._end = None if timeout is None else time.monotonic() + timeout

    def remaining(self) -> float | None:
        """Seconds left (never negative), or ``None`` for no bound."""
        return None if self._end is None else max(0.0, self._end - time.monotonic())


#: The deadline of the value a consumer's ``next()`` is making out of several pulls of its
#: source (a ``ReadyBatcher``'s batch): each pull waits only for what is left of it, so the
#: node's ``timeout`` bounds that ``next()``, not each pull. Per thread and task.
_call_deadline: contextvars.ContextVar[Deadline | None] = contextvars.ContextVar(
    "datapipes_call_deadline", default=None
)


def pull_deadline(timeout: float | None) -> Deadline | None:
    """The deadline of one pull of a node with ``timeout``: the enclosing call's
    (:func:`call_deadline`), else one of its own."""
    outer = _call_deadline.get()
    if outer is not None:
        return outer
    return None if timeout is None else Deadline(timeout)


@contextlib.contextmanager
def call_deadline(timeout: float | None) -> Iterator[None]:
    """Within the block, every pull on this thread shares one deadline of ``timeout`` seconds
    (no change for ``None``)."""
    if timeout is None:
        yield
        return
    token = _call_deadline.set(Deadline(timeout))
    try:
        yield
    finally:
        _call_deadline.reset(token)


#: The longest one blocking wait of a consumer lasts: Python runs a signal handler on the
#: main thread only when that thread runs bytecode, and the kernel may hand the signal to
#: another thread, which does not wake a main thread parked in a wait. Waits are sliced so
#: Ctrl-C raises within this many seconds whichever thread took the signal.
WAIT_SLICE_S = 0.25


def wait_slice(deadline: Deadline | None) -> float:
    """How long a consumer's next blocking wait may last: the deadline's seconds left, at most
    :data:`WAIT_SLICE_S` (a slice that ends early is no timeout: check the deadline)."""
    remaining = None if deadline is None else deadline.remaining()
    return WAIT_SLICE_S if remaining is None else min(remaining, WAIT_SLICE_S)


def expired(deadline: Deadline | None) -> bool:
    """True when ``deadline`` is bounded and has no time left."""
    return deadline is not None and not deadline.remaining()


class WeakRegistry(Generic[_T]):
    """Weak references to objects, in the order they were added, that any thread may add to,
    drop members of (by dropping their last reference) and list at once.

    Not a ``weakref.WeakSet`` or ``WeakValueDictionary``: those remove a dead member in a
    callback that checks, then changes, a Python-level "iterating" guard; on a free-threaded
    build a member dropped on one thread while another lists them raises "Set (dictionary)
    changed size during iteration". Here the callback is one ``dict.pop`` and listing starts
    from one ``dict.copy()``, each a single operation under the dict's own lock (the GIL on a
    GIL build), so neither can see the other half done."""

    __slots__ = ("__weakref__", "_order", "_refs")

    def __init__(self) -> None:
        self._refs: dict[int, weakref.ref[_T]] = {}
        self._order = itertools.count()  # next() is atomic (one C call)

    def add(self, obj: _T) -> None:
        """Hold ``obj`` weakly until it dies."""
        key = next(self._order)
        self._refs[key] = weakref.ref(obj, functools.partial(_forget, weakref.ref(self), key))

    def alive(self) -> list[_T]:
        """The members still alive, oldest first."""
        return [obj for obj in (ref() for ref in self._refs.copy().values()) if obj is not None]

    def clear(self) -> None:
        """Forget every member."""
        self._refs.clear()


def _forget(registry: weakref.ref[WeakRegistry[Any]], key: int, _dead: object) -> None:
    held = registry()
    if held is not None:
        held._refs.pop(key, None)


_registry_lock = threading.Lock()
_registry: WeakRegistry[Stoppable] = WeakRegistry()
_threads: WeakRegistry[threading.Thread] = WeakRegistry()
_hook_installed = False


def register_for_exit(obj: Stoppable) -> None:
    """Call ``obj.shutdown()`` at interpreter exit if ``obj`` is still alive then."""
    global _hook_installed
    with _registry_lock:
        _registry.add(obj)
        if not _hook_installed:
            atexit.register(_shutdown_all)
            _hook_installed = True


def _shutdown_all() -> None:
    with _registry_lock:
        alive = _registry.alive()[::-1]  # newest first
    deadline = Deadline(EXIT_JOIN_TIMEOUT)  # one bound for all of them
    for obj in alive:
        try:
            obj.shutdown(timeout=deadline.remaining())
        except Exception as exc:  # one run failing to stop must not keep the others running
            warnings.warn(f"stopping {obj!r} at exit failed: {exc!r}", RuntimeWarning, stacklevel=1)
    # Threads of runs closed earlier may still be finishing a call. Left running, one that
    # reaches a torch op while the interpreter finalizes can abort the process ("terminate
    # called without an active exception"): give them what is left of the bound to end.
    join_threads(tracked_threads(), deadline.remaining(), warn=False)


def tracked_threads() -> list[threading.Thread]:
    """The threads :func:`track_thread` was given that are still referenced, oldest first."""
    with _registry_lock:
        return _threads.alive()


def track_thread(thread: threading.Thread) -> None:
    """Let the exit hook wait (within its bound) for ``thread`` to end."""
    with _registry_lock:
        _threads.add(thread)


def start_thread(target: Callable[[], object], name: str) -> threading.Thread:
    """Start ``target`` on a named daemon thread."""
    thread = threading.Thread(target=target, name=name, daemon=True)
    track_thread(thread)
    thread.start()
    return thread


def join_threads(threads: Iterable[threading.Thread], timeout: float | None, *, warn: bool = True) -> None:
    """Join each thread (never the calling one) within ``timeout`` seconds in all; warn once,
    naming every straggler."""
    current = threading.current_thread()
    deadline = Deadline(timeout)
    stuck = []
    for thread in threads:
        if thread is current or not thread.is_alive():  # not started (join() refuses it), or ended
            continue
        thread.join(deadline.remaining())
        if thread.is_alive():
            stuck.append(thread.name)
    if warn and stuck:
        warn_stuck(stuck, timeout)


def warn_stuck(names: Iterable[str], timeout: float | None) -> None:
    """One warning naming the threads still in a call after close() waited ``timeout``."""
    warnings.warn(
        f"thread(s) {', '.join(repr(n) for n in names)} still running a call after close() waited "
        f"{timeout}s; each exits when its call returns",
        RuntimeWarning,
        stacklevel=3,
    )


def close_source(source: Any, *, busy: bool, timeout: float | None = DEFAULT_JOIN_TIMEOUT, warn: bool = True) -> bool:
    """Close a source iterator within ``timeout`` (its ``shutdown(timeout)`` when it has one);
    True if it stopped in time. With ``busy=True`` another thread may be inside its ``next()``:
    a generator refuses that (``ValueError``), and the caller closes it again once that thread
    has returned."""
    try:
        shutdown = getattr(source, "shutdown", None)
        if shutdown is None:
            source.close()
            return True
        return shutdown(timeout, warn=warn) is not False
    except ValueError:
        if not busy:
            raise
        return True
