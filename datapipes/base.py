"""The node protocol: :class:`Node` holds configuration, :class:`NodeIterator` one epoch's run state.

A node is a :class:`torch.utils.data.IterableDataset`. ``iter(node)`` builds a fresh
:class:`NodeIterator` that owns every thread, queue and source iterator of that epoch;
iterating again starts a new epoch. Closing the iterator (``close()``, ``with``, exhaustion,
or dropping the last reference) stops them.

State: ``node.state_dict()`` describes the position of the node's most recent iterator,
just after the last item it handed to its consumer; ``node.load_state_dict(sd)`` makes the
*next* ``iter(node)`` resume from there, yielding exactly the items that were left.
Each node nests its source's state under the key ``"source"``.
"""

from __future__ import annotations

import functools
import reprlib
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar, cast

from torch.utils.data import IterableDataset

from datapipes._lifecycle import DEFAULT_JOIN_TIMEOUT, INTERRUPT_JOIN_TIMEOUT
from datapipes.stats import NodeStats, StatsCounter

if TYPE_CHECKING:
    from collections.abc import Sequence

    from datapipes.async_fetcher import AsyncFetcher
    from datapipes.batcher import Batcher
    from datapipes.collator import Collator
    from datapipes.filter import Filter
    from datapipes.header import Header
    from datapipes.prefetcher import Prefetcher
    from datapipes.shuffler import Shuffler
    from datapipes.thread_mapper import ThreadMapper
    from datapipes.unbatcher import Unbatcher

__all__ = ["Node", "NodeIterator", "StateDict", "add_item_note", "as_node"]

T = TypeVar("T")
U = TypeVar("U")
StateDict = dict[str, Any]

_item_repr = reprlib.Repr()
_item_repr.maxstring = 60
_item_repr.maxother = 60
_item_repr.maxlist = 8


def add_item_note(exc: BaseException, node: str, seq: int, item: object) -> None:
    """Note on ``exc`` which node raised it, for which item (position in this epoch and value)."""
    exc.add_note(f"[datapipes] raised in {node} for item #{seq} of this epoch: {_item_repr.repr(item)}")


class NodeIterator(Iterator[T]):
    """One epoch of a node. ``close()`` is idempotent and also closes the source iterator."""

    def __iter__(self) -> NodeIterator[T]:
        return self

    def __next__(self) -> T:
        raise NotImplementedError

    def state_dict(self) -> StateDict:
        """State to resume just after the last item this iterator returned."""
        raise NotImplementedError

    def close(self) -> None:
        """Stop this epoch's work and release its threads and source iterators."""

    def shutdown(self, timeout: float | None = DEFAULT_JOIN_TIMEOUT, *, warn: bool = True) -> bool:
        """``close()``, waiting at most ``timeout`` seconds in all for calls in progress (a
        thread still in one is named in a warning unless ``warn=False``); True when every
        thread of the graph stopped in time. Nodes with no threads of their own pass the bound
        on to their sources."""
        self.close()
        return True

    def __enter__(self) -> NodeIterator[T]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class _Epoch(NodeIterator[T]):
    """What ``iter(node)`` returns: the consumer's handle on one epoch of a graph.

    Closing it, or dropping the last reference to it, closes the graph's iterators (and so
    stops their threads) and tells ``keep`` the epoch's state then, so the node's
    ``state_dict()`` still says where the epoch got to. Its ``__next__`` keeps no reference to
    the handle in its frame: an exception the consumer keeps holds the frames of its traceback,
    and those must not keep the epoch and its threads alive.
    """

    def __init__(self, it: NodeIterator[T], keep: Callable[[StateDict], None]) -> None:
        self._it = it
        self._keep = keep
        # Dropped: stop within the short bound (collection may run on any thread, even one of
        # the graph's own, and must not wait on a stuck call).
        self._finalizer = weakref.finalize(self, _drop_epoch, it, keep)
        self._finalizer.atexit = False  # at exit, the runs' own exit hook stops them

    def __next__(self) -> T:
        it = self._it
        del self  # see the class docstring
        return next(it)

    def state_dict(self) -> StateDict:
        return self._it.state_dict()

    def close(self) -> None:
        self.shutdown()

    def shutdown(self, timeout: float | None = DEFAULT_JOIN_TIMEOUT, *, warn: bool = True) -> bool:
        if self._finalizer.detach() is None:
            return True  # closed already
        stopped = self._it.shutdown(timeout, warn=warn)
        self._keep(self._it.state_dict())
        return stopped

    def __repr__(self) -> str:
        return f"<epoch of {self._it!r}>"


def _drop_epoch(it: NodeIterator[Any], keep: Callable[[StateDict], None]) -> None:
    """An epoch's handle was dropped: stop its iterators briefly, and keep its state."""
    it.shutdown(INTERRUPT_JOIN_TIMEOUT)
    keep(it.state_dict())


class Node(IterableDataset[T], Generic[T]):
    """Base class of every datapipes node.

    Subclasses implement :meth:`_open`, which returns the iterator of one epoch, resumed from
    ``state`` when it is not ``None``. Everything else (the iterator protocol, state
    bookkeeping, stats and chaining) lives here.
    """

    source: Node[Any] | None

    def __init__(self, source: Node[Any] | Iterable[Any] | None = None, *, name: str | None = None) -> None:
        self.source = None if source is None else as_node(source)
        self.name = name or type(self).__name__
        self._stats = StatsCounter(self.name)
        self._state_lock = threading.Lock()
        self._pending_state: StateDict | None = None
        self._current: weakref.ref[NodeIterator[T]] | None = None
        self._epochs = 0  # iter() calls so far; guarded by _state_lock
        self._closed_state: StateDict | None = None  # the newest epoch's, once closed or dropped

    # -- the one extension point -------------------------------------------------------------
    def _open(self, state: StateDict | None) -> NodeIterator[T]:
        raise NotImplementedError

    def _open_source(self, state: StateDict | None) -> NodeIterator[Any]:
        """Open the source's iterator for this epoch, resumed from ``state['source']``."""
        if self.source is None:
            raise TypeError(f"{self.name} has no source node")
        return self.source._open(None if state is None else state.get("source"))

    # -- iteration and state -----------------------------------------------------------------
    def open(self) -> NodeIterator[T]:
        """One epoch's iterator, resumed from a loaded state, without the handle ``iter()``
        wraps it in: the caller owns it and must ``close()`` (or ``shutdown()``) it, since
        dropping it does not stop the graph's threads. For owners that close epochs themselves
        (a loader) and want no extra call per item. ``state_dict()`` of the node does not
        follow it; ask the iterator."""
        _refuse_process_workers(self)
        with self._state_lock:
            state, self._pending_state = self._pending_state, None
        return self._open(state)

    def __iter__(self) -> NodeIterator[T]:
        _refuse_process_workers(self)
        with self._state_lock:
            state, self._pending_state = self._pending_state, None
        inner = self._open(state)
        with self._state_lock:
            self._epochs += 1
            epoch = self._epochs
            self._closed_state = None
        it: NodeIterator[T] = _Epoch(inner, functools.partial(self._keep_state, epoch))
        with self._state_lock:
            self._current = weakref.ref(it)
        return it

    def _keep_state(self, epoch: int, state: StateDict) -> None:
        """Epoch ``epoch``'s iterator closed (or was dropped) in ``state``: kept unless a newer
        epoch began."""
        with self._state_lock:
            if epoch == self._epochs:
                self._closed_state = state

    def state_dict(self) -> StateDict:
        """The state of the most recent iterator while it is referenced; else a state loaded
        since (``load_state_dict``); else that iterator's state when it was closed or dropped;
        ``{}`` (a fresh epoch) if there is none."""
        with self._state_lock:
            it = self._current() if self._current is not None else None
            pending, closed = self._pending_state, self._closed_state
        if it is not None:
            return it.state_dict()
        if pending is not None:
            return dict(pending)
        return dict(closed) if closed is not None else {}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Make the next ``iter(self)`` resume from ``state_dict`` (``{}`` starts afresh)."""
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"state_dict must be a mapping from a node's state_dict(), got {type(state_dict).__name__}")
        with self._state_lock:
            self._pending_state = dict(state_dict) or None

    def stats(self) -> dict[str, Any]:
        """This node's counters and, under ``"source"``, its source's, summed over all epochs."""
        out: dict[str, Any] = self._stats.snapshot().as_dict()
        if self.source is not None:
            out["source"] = self.source.stats()
        return out

    def node_stats(self) -> NodeStats:
        """This node's own counters, without its sources'."""
        return self._stats.snapshot()

    def __repr__(self) -> str:
        return f"{self.name}({self.source!r})" if self.source is not None else f"{self.name}()"

    # -- chaining: ``a.batch(4).map(f)`` builds ``ThreadMapper(Batcher(a, 4), f)`` -----------
    def batch(self, batch_size: int, *, drop_last: bool = False) -> Batcher[T]:
        from datapipes.batcher import Batcher

        return Batcher(self, batch_size, drop_last=drop_last)

    def unbatch(self) -> Unbatcher[Any]:
        from datapipes.unbatcher import Unbatcher

        return Unbatcher(cast("Node[Sequence[Any]]", self))

    def map(
        self,
        fn: Callable[[T], U],
        *,
        num_threads: int = 1,
        max_pending: int | None = None,
        in_order: bool = True,
        on_error: Literal["raise", "skip"] = "raise",
    ) -> ThreadMapper[U]:
        from datapipes.thread_mapper import ThreadMapper

        return ThreadMapper(
            self, fn, num_threads=num_threads, max_pending=max_pending, in_order=in_order, on_error=on_error
        )

    def async_map(
        self,
        fn: Callable[[T], Any],
        *,
        max_concurrency: int = 16,
        in_order: bool = True,
        on_error: Literal["raise", "skip"] = "raise",
    ) -> AsyncFetcher[Any]:
        from datapipes.async_fetcher import AsyncFetcher

        return AsyncFetcher(self, fn, max_concurrency=max_concurrency, in_order=in_order, on_error=on_error)

    def collate(self, fn: Callable[[T], U] | None = None) -> Collator[U]:
        from datapipes.collator import Collator

        return Collator(self, fn)

    def prefetch(self, depth: int = 2, *, pin_memory: bool = False) -> Prefetcher[T]:
        from datapipes.prefetcher import Prefetcher

        return Prefetcher(self, depth, pin_memory=pin_memory)

    def shuffle(self, buffer_size: int, *, seed: int | None = None) -> Shuffler[T]:
        from datapipes.shuffler import Shuffler

        return Shuffler(self, buffer_size, seed=seed)

    def filter(self, predicate: Callable[[T], bool]) -> Filter[T]:
        from datapipes.filter import Filter

        return Filter(self, predicate)

    def header(self, limit: int) -> Header[T]:
        from datapipes.header import Header

        return Header(self, limit)


def _refuse_process_workers(node: Node[Any]) -> None:
    """A graph iterated in each of torch's worker processes would yield its data once per
    worker: refuse that (a ThreadLoader's worker threads never iterate a whole graph)."""
    from torch.utils.data import get_worker_info

    info = get_worker_info()
    if info is None or info.num_workers <= 1 or getattr(info, "worker_method", None) == "thread":
        return
    raise RuntimeError(
        f"{node.name}: a datapipes graph was iterated in a worker process of torch's DataLoader with "
        f"num_workers={info.num_workers}, so each worker would yield all its data once; a graph runs its "
        "own threads: pass it to DataLoader(num_workers=0) or to torch_threadloader.ThreadLoader"
    )


def as_node(source: Node[T] | Iterable[T]) -> Node[T]:
    """``source`` itself if it is a node, else an :class:`~datapipes.IterableWrapper` around it."""
    if isinstance(source, Node):
        return source
    from datapipes.iterable_wrapper import IterableWrapper

    if not isinstance(source, Iterable):
        raise TypeError(f"source must be a datapipes Node or an iterable, got {type(source).__name__}")
    return IterableWrapper(source)
