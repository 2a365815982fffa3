"""A ThreadLoader's checkpoint: what ``state_dict()`` holds and how an epoch keeps it.

The state is plain Python data (``int``, ``bool``, ``str``, ``bytes``, lists, dicts), so
``torch.save`` / ``torch.load(weights_only=True)`` round-trip it. What it records depends on
the dataset kind (see ``docs/architecture.md``, "Resume"):

* map-style (sync or async): the epoch's random state (or the sampler's own ``state_dict()``),
  and the *positions* in the epoch's order of the batches delivered: every one below
  ``frontier``, and ``done`` (ranges ``[start, stop)``) above it. Global, not per worker: a
  resume may change ``num_workers``, ``item_concurrency`` and ``in_order``.
* IterableDataset: per worker, the batches it delivered (and the dataset copy's own
  ``state_dict()`` after its last one, when it has one), and which worker is next in turn.
* ``datapipes`` graph: the graph's state after the last batch delivered.

Each ledger below is owned by the epoch's consumer thread; the loader reads it under its lock.
"""

from __future__ import annotations

import copy
import sys
import threading
import types
import warnings
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch

from datapipes._rng import state_bytes, state_tensor

__all__ = [
    "EpochRecord",
    "FORMAT",
    "IterableLedger",
    "NodeLedger",
    "PositionLedger",
    "check_config",
    "describe_order",
    "encode_ranges",
    "find_prefetching_fetcher",
    "gather_ranks",
    "global_rng_of",
    "loader_config",
    "pick_rank",
    "plain",
    "replay_batches",
    "replay_epoch",
    "reshard",
    "restore_generators",
    "sampler_generator",
    "tag_error",
    "tag_of",
    "uses_global_rng",
]

FORMAT = "torch_threadloader/state-1"

#: How many recent deliveries a ledger remembers, to give the state as it was before the
#: batches a consumer holds fetched but not used (Lightning's fetcher holds one).
RECENT = 8


def encode_ranges(positions: Iterable[int]) -> list[list[int]]:
    """Sorted positions as ``[[start, stop), ...]``: a run of consecutive ones costs one pair."""
    out: list[list[int]] = []
    for p in sorted(positions):
        if out and out[-1][1] == p:
            out[-1][1] = p + 1
        else:
            out.append([p, p + 1])
    return out


_TAG = "_threadloader_tag"
_NO_TAG = object()


def tag_error(exc: BaseException, tag: Any) -> None:
    """Mark ``exc`` with the tag of the batch it fails (its position, worker or graph state):
    the batch counts as delivered when ``next()`` raises it, as torch goes on after it."""
    try:
        setattr(exc, _TAG, tag)
    except (AttributeError, TypeError):  # an exception type without a __dict__
        pass


def tag_of(exc: BaseException) -> Any:
    """The tag :func:`tag_error` put on ``exc``, else ``NO_TAG``."""
    return getattr(exc, _TAG, _NO_TAG)


NO_TAG = _NO_TAG


def plain(obj: Any) -> Any:
    """The loader's own state data with tensors (generator states, ``uint8`` tensors) as
    ``bytes`` and tuples as lists: data ``torch.load(weights_only=True)`` loads. Not for a
    user object's own state, which is kept as it is given (:func:`snapshot`)."""
    if isinstance(obj, torch.Tensor):
        return state_bytes(obj)
    if isinstance(obj, Mapping):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [plain(v) for v in obj]
    return obj


def snapshot(state: Any, owner: object) -> Any:
    """A user object's own ``state_dict()`` (``owner``'s: a sampler's, a dataset's) as it is
    now: a copy, as crossing to another process would make, so that the object changing its
    state later changes no state already taken. Its values keep their types (tensors stay
    tensors, for its ``load_state_dict()``); containers and tensors are copied directly,
    immutable values kept, anything else deep-copied. ``TypeError`` naming ``owner`` for a
    value that cannot be copied."""
    try:
        return _copied(state)
    except Exception as exc:
        raise TypeError(
            f"{type(owner).__name__}.state_dict() returned a state that cannot be copied ({exc}); a state must be "
            "data (numbers, strings, bytes, tensors, lists, dicts), as torch.save and worker processes need"
        ) from exc


def _copied(value: Any) -> Any:
    if value is None or isinstance(value, int | float | str | bytes | bool):
        return value
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if type(value) is dict:
        return {k: _copied(v) for k, v in value.items()}
    if type(value) is list:
        return [_copied(v) for v in value]
    if type(value) is tuple:
        return tuple(_copied(v) for v in value)
    return copy.deepcopy(value)


def as_tensor_state(value: Any) -> torch.Tensor:
    """A generator state saved as ``bytes`` (by :func:`plain`) back as a ``uint8`` tensor."""
    return state_tensor(value)


class PositionLedger:
    """Which positions of a map-style epoch's order were delivered."""

    def __init__(self, frontier: int = 0, done: Iterable[Iterable[int]] = ()) -> None:
        self.frontier = frontier
        self.extra: set[int] = set()
        for start, stop in done:
            self.extra.update(range(int(start), int(stop)))
        self._absorb()
        # Delivered before this epoch (by the run this one resumes): never "held" by a consumer.
        self.before = (self.frontier, frozenset(self.extra))
        self.recent: deque[int] = deque(maxlen=RECENT)

    def _absorb(self) -> None:
        extra = self.extra
        while self.frontier in extra:
            extra.discard(self.frontier)
            self.frontier += 1

    def add(self, position: int) -> None:
        if position == self.frontier:
            self.frontier += 1
            if self.extra:
                self._absorb()
        else:
            self.extra.add(position)
        self.recent.append(position)

    def set_in_order(self, frontier: int, skip: Iterable[Iterable[int]]) -> None:
        """From a sampler's own state (``yielded``, ``skip``): a consumer without positions."""
        self.frontier = frontier
        self.extra = set()
        for start, stop in skip:
            self.extra.update(range(int(start), int(stop)))

    def state(self, held: int = 0) -> dict[str, Any]:
        frontier, extra = self.frontier, set(self.extra)
        if held:
            for position in self._last(held, frontier, extra):
                if position >= frontier:
                    extra.discard(position)
                else:
                    extra.update(range(position + 1, frontier))
                    frontier = position
        return {"frontier": frontier, "done": encode_ranges(extra)}

    def _last(self, held: int, frontier: int, extra: set[int]) -> list[int]:
        if self.recent:
            return list(self.recent)[-held:]
        # In-order consumer without positions: the last ``held`` delivered below the frontier.
        before_frontier, before_extra = self.before
        out: list[int] = []
        p = frontier - 1
        while len(out) < held and p >= 0 and not (p < before_frontier or p in before_extra):
            out.append(p)
            p -= 1
        return out[::-1]


class IterableLedger:
    """Per worker of an IterableDataset epoch: batches delivered, and the dataset copy's state
    after its last one (``None`` for a dataset without ``state_dict``)."""

    def __init__(
        self, num_workers: int, state: Mapping[str, Any] | None = None, start: Sequence[Any] | None = None
    ) -> None:
        workers = list(state["workers"]) if state else [{} for _ in range(num_workers)]
        self.batches = [int(w.get("batches", 0)) for w in workers]
        self.states: list[Any] = [w.get("state") for w in workers]
        if state is None and start is not None:  # the copies' own states as the epoch starts
            self.states = [start[w] if w < len(start) else None for w in range(num_workers)]
        self.ended = [bool(w.get("ended", False)) for w in workers]
        # Items each worker read (a dataset without state of its own is resumed by reading
        # them again; a failed batch read fewer than batch_size), when counted.
        self.items: list[int | None] = [w.get("items") for w in workers]
        self.turn = int(state.get("turn", 0)) if state else 0
        self.recent: deque[tuple[int, Any, bool, int | None]] = deque(maxlen=RECENT)

    def add(self, tag: tuple[Any, ...]) -> None:
        worker, state, ended = tag[0], tag[1], tag[2]
        self.recent.append((worker, self.states[worker], self.ended[worker], self.items[worker]))
        self.batches[worker] += 1
        self.states[worker] = state
        self.ended[worker] = ended
        if len(tag) > 3:
            self.items[worker] = tag[3]
        self.turn = (worker + 1) % len(self.batches)

    def state(self, held: int = 0) -> dict[str, Any]:
        batches, states, ended, items = list(self.batches), list(self.states), list(self.ended), list(self.items)
        turn = self.turn
        for worker, before, was_ended, read in list(self.recent)[::-1][:held]:
            batches[worker] -= 1
            states[worker] = before
            ended[worker] = was_ended
            items[worker] = read
            turn = worker
        workers = []
        for b, st, e, n in zip(batches, states, ended, items, strict=True):
            entry: dict[str, Any] = {"batches": b, "state": st, "ended": e}
            if n is not None:
                entry["items"] = n
            workers.append(entry)
        return {"workers": workers, "turn": turn, "all_ended": all(ended)}


class NodeLedger:
    """A ``datapipes`` graph's state after the last batch delivered, and whether the graph
    ended while that batch was made."""

    def __init__(self, state: Any) -> None:
        self.last: tuple[Any, bool] = (state, False)
        self.recent: deque[tuple[Any, bool]] = deque(maxlen=RECENT)

    def add(self, tag: tuple[Any, bool]) -> None:
        self.recent.append(self.last)
        self.last = tag

    def state(self, held: int = 0) -> dict[str, Any]:
        last = self.last
        if held:
            recent = list(self.recent)
            last = recent[-held] if held <= len(recent) else recent[0]
        return {"graph": last[0], "all_ended": last[1]}


def find_prefetching_fetcher() -> weakref.ref[Any] | None:
    """Lightning's ``_PrefetchDataFetcher`` whose ``iter()`` is calling us, if one is.

    For a loader without a length, Lightning's fetcher asks for one batch more than the step
    it trains (to know whether it is the last); a checkpoint taken then must not count the
    batch it holds. An epoch of ``torch_threadloader.integrations`` that fetches ahead (its class
    sets ``holds_batches_ahead``, with ``batches`` and ``length = None``) is found the same way. The fetcher's ``batches`` list says how many it holds when the state is
    taken. Found once per epoch by looking up the caller's frames (no per-batch cost)."""
    frame: types.FrameType | None = sys._getframe(1)
    for _ in range(24):
        if frame is None:
            return None
        # Only a Lightning frame's locals are read: reading a frame's f_locals keeps a
        # reference to each local on CPython < 3.13 (the caller's loader, say) until it returns.
        module = str(frame.f_globals.get("__name__", ""))
        ours = module.startswith("torch_threadloader.integrations.")
        if (ours or module.split(".")[0] in ("lightning", "pytorch_lightning")) and frame.f_code.co_name == "__iter__":
            owner = frame.f_locals.get("self")
            # An integration's epoch that looks one batch ahead (accelerate's rule) says so.
            if owner is not None and (
                type(owner).__name__ == "_PrefetchDataFetcher"
                or (ours and getattr(owner, "holds_batches_ahead", False))
            ):
                return weakref.ref(owner)
        frame = frame.f_back
    return None


def held_by(fetcher: weakref.ref[Any] | None) -> int:
    """How many delivered batches ``fetcher`` holds, not yet handed to the training step."""
    owner = fetcher() if fetcher is not None else None
    if owner is None or getattr(owner, "length", None) is not None:
        return 0
    batches = getattr(owner, "batches", None)
    return len(batches) if isinstance(batches, list) else 0


# -- the loader's side -----------------------------------------------------------------------


def _delivered_errors(records: list[dict[str, Any]], positions: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The skip records of batches delivered (a batch still loading is loaded again on resume)."""
    frontier = int(positions["frontier"])
    done = [(int(a), int(b)) for a, b in positions["done"]]

    def delivered(batch: Any) -> bool:
        return batch is None or batch < frontier or any(a <= batch < b for a, b in done)

    return [{k: v for k, v in r.items() if k != "epoch"} for r in records if delivered(r.get("batch"))]


def sampler_state_in(graph_state: Any) -> dict[str, Any]:
    """The ``datapipes.Sampler`` state nested (under ``"source"``) in a map-style graph's."""
    state = graph_state
    while isinstance(state, Mapping) and "rng" not in state:
        state = state.get("source")
    if not isinstance(state, Mapping):
        raise RuntimeError(f"no sampler state in the epoch's graph state {graph_state!r}")
    return dict(state)


class EpochRecord:
    """What one epoch delivered, kept by the loader apart from the epoch's iterator (so a
    state can be taken after the iterator is gone, and holding it keeps no thread alive).
    The consumer's thread adds to it; ``state()`` may run on any thread (``lock``)."""

    def __init__(
        self,
        loader: Any,
        resume: Mapping[str, Any] | None,
        *,
        base_seed: int,
        drew_base_seed: bool,
        loader_rng: torch.Tensor | None,
        sampler_state: Any,
        fetcher: weakref.ref[Any] | None,
        total: int | None = None,
        eager: Mapping[str, Any] | None = None,
        indices: Any = None,
        iterable_start: Sequence[Any] | None = None,
    ) -> None:
        self.kind: str = loader._kind
        self.lock = threading.Lock()
        self.resume = dict(resume) if resume is not None else None
        self.meta: dict[str, Any] = {
            "base_seed": base_seed,
            "drew_base_seed": drew_base_seed,
            "loader_rng": plain(loader_rng),
            "sampler_state": sampler_state,  # a copy already
        }
        if self.kind in ("map", "async"):
            self.meta["order"] = describe_order(loader)
        if resume is not None and resume.get("resharded") is not None:
            self.meta["resharded"] = resume["resharded"]
            self.meta["order"] = None  # the epoch's batches are dealt out from the state, not drawn
        self.fetcher = fetcher
        self.finished = False
        self.frozen = False  # the epoch's iterator closed (see freeze)
        self.it: Any = None
        self.total: int | None = None
        self.ledger: PositionLedger | IterableLedger | NodeLedger
        if self.kind in ("map", "async"):
            # Batches that may come out of order carry their position (also from worker processes).
            self.tagged = (
                self.kind == "async"
                or loader.num_workers > 0
                or bool(getattr(loader, "worker_processes", 0))
                or loader._errors.skips  # a skipped sample's record names its batch (graph.py)
            )
            self.ledger = PositionLedger(resume["frontier"], resume["done"]) if resume else PositionLedger()
            self.rng = resume["rng"] if resume else None
            # torch's global generator at the order's draw, for a sampler with its own generator.
            self.rng_global = resume.get("rng_global") if resume else None
            self.drawn = bool(resume.get("drawn", True)) if resume else True
            # The random states an order drawn at iter() (a sampler whose __iter__ draws at
            # once) was drawn from; the graph's Sampler only sees them after the draw.
            self.eager = dict(eager) if eager else None
            # The epoch's started index iterable: has the Sampler pulled it (drawn the order)?
            self.indices = indices
            if total is not None:
                self.total = total
            else:
                try:
                    self.total = len(loader._index_sampler)
                except TypeError:
                    self.total = None
        elif self.kind == "iterable":
            self.tagged = True
            self.ledger = IterableLedger(total_workers(loader), resume, iterable_start)
        else:
            self.tagged = True
            # A fresh epoch's start is the graph's state once opened (graph_opened).
            self.ledger = NodeLedger(resume["graph"] if resume else {})

    def resume_part(self) -> dict[str, Any] | None:
        return self.resume

    def attach(self, it: Any) -> None:
        self.it = it

    def freeze(self) -> None:
        """The epoch's iterator is closing: keep what its graph says of the sampler now (a
        closed sampler forgets the positions it was to pass over)."""
        with self.lock:
            self.frozen = True
        it = self.it
        if it is None or self.kind not in ("map", "async"):
            return
        try:
            sampler = sampler_state_in(it.state_dict())
        except Exception:  # a graph that could not even open: nothing delivered
            self.it = None
            return
        with self.lock:
            self.rng = sampler["rng"]
            self.rng_global = sampler.get("global_rng")
            self.drawn = bool(sampler.get("drawn", True))
            if not self.tagged:
                assert isinstance(self.ledger, PositionLedger)
                self.ledger.set_in_order(int(sampler["yielded"]), sampler.get("skip", ()))
            self.it = None

    def add(self, tag: Any) -> None:
        with self.lock:
            self.ledger.add(tag)

    def finish(self) -> None:
        """The epoch's graph ran out; not after the epoch was closed (a ``next()`` after
        ``close()`` ends at once, and the epoch is as far as it got)."""
        with self.lock:
            if not self.frozen:
                self.finished = True

    def state(self, loader: Any) -> dict[str, Any]:
        held = held_by(self.fetcher)
        graph_state = None
        if self.kind in ("map", "async") and self.it is not None:
            graph_state = self.it.state_dict()  # outside our lock: the graph has its own
        with self.lock:
            finished = self.finished
            state: dict[str, Any] = {"config": loader_config(loader)}
            if self.kind in ("map", "async"):
                ledger = self.ledger
                assert isinstance(ledger, PositionLedger)
                rng, rng_global = self.rng, self.rng_global
                if graph_state is not None:
                    sampler = sampler_state_in(graph_state)
                    rng, rng_global = sampler["rng"], sampler.get("global_rng")
                    # A ThreadMapper's state before its first batch is its sampler's before
                    # the order was drawn; the draw may have happened since (its prefetch).
                    state["drawn"] = bool(sampler.get("drawn", True)) or self._order_started()
                    if not self.tagged:
                        ledger.set_in_order(int(sampler["yielded"]), sampler.get("skip", ()))
                else:
                    state["drawn"] = self.drawn
                if self.eager is not None:
                    state["drawn"], state["eager"] = True, self.eager
                positions = ledger.state(held)
                finished = finished or (self.total is not None and positions["frontier"] >= self.total)
                state.update(positions)
                state["rng"] = plain(rng)
                if rng_global is not None:
                    state["rng_global"] = plain(rng_global)
                state["errors"] = _delivered_errors(loader._errors.this_epoch(), positions)
            else:
                state.update(self.ledger.state(held))
                finished = finished or state.pop("all_ended")
        if finished:
            # The epoch is over: the next iter() is a new epoch, drawn from the generators as
            # the epoch left them. A sampler generator's end state is not read now (without
            # workers nothing has read past the last batch, and torch's RandomSampler makes a
            # last draw when its iterator ends): loading replays the epoch from its start.
            ended = state
            state = {"config": ended["config"], "finished": True}
            if self.kind == "node":  # its generators are in it: loaded, they draw the next epoch
                state["graph"] = ended["graph"]
            if self.kind == "iterable":
                datasets = iterable_datasets_states(loader)
                if datasets is not None:  # the copies live on into the next epoch with these
                    state["datasets"] = datasets
            state.update(self.generators_of(loader))
            if self.kind in ("map", "async"):
                state["rng"] = ended.get("rng")
                if ended.get("eager"):
                    state["eager"] = ended["eager"]
            state.update(sampler_state_of(loader))
            if loader.persistent_workers and loader.num_workers > 0:
                state["base_seed"] = self.meta["base_seed"]
            state.update(global_rng_of(loader, state.get("eager")))
            return state
        state["finished"] = False
        state.update(self.meta)
        state.update(global_rng_of(loader, state.get("eager")))
        return state

    def graph_opened(self, state: Any) -> None:
        """A fresh epoch's graph (``datapipes`` node as the dataset) was opened, in ``state``: the
        state before its first batch (a graph keeps its generators across epochs, so ``{}``,
        a fresh graph's, is right only for its first epoch)."""
        with self.lock:
            ledger = self.ledger
            if isinstance(ledger, NodeLedger) and not ledger.recent:
                ledger.last = (state, False)

    def _order_started(self) -> bool:
        started = getattr(self.indices, "started", None)
        return bool(started() if callable(started) else False)

    @staticmethod
    def generators_of(loader: Any) -> dict[str, Any]:
        """The states of the loader's and its sampler's generators now (``None`` without one)."""
        own = loader.generator
        sampler = sampler_generator(loader._index_sampler) if loader._kind in ("map", "async") else None
        return {
            "generators": {
                "loader": plain(own.get_state()) if own is not None else None,
                "sampler": plain(sampler.get_state()) if sampler is not None and sampler is not own else None,
            }
        }


def iterable_datasets_states(loader: Any) -> list[Any] | None:
    """The own states (``state_dict()``, copied) of an IterableDataset's copies that live on
    from epoch to epoch: the loader's dataset itself without workers, each persistent worker's
    copy (``None`` for one not started yet); ``None`` where the copies are made anew each epoch
    (or live in worker processes) or the dataset has no state of its own. Read when no epoch
    is iterating them (at an epoch's start, or after its end)."""
    if loader._kind != "iterable" or getattr(loader, "worker_processes", 0) or not is_stateful(loader.dataset):
        return None
    if loader.num_workers == 0:
        return [_own_state_or_none(loader.dataset)]
    workers = loader._kept.resources.workers if loader.persistent_workers else None
    if workers is None:
        return None
    copies = workers.started_datasets()
    return [_own_state_or_none(copies[w]) if w in copies else None for w in range(loader.num_workers)]


def _own_state_or_none(dataset: Any) -> Any:
    """``dataset.state_dict()`` (copied) before its epoch's first batch, or ``None`` where it
    fails (a dataset whose state exists only once iterated): its resume then starts from a
    fresh copy, as it did without this state."""
    try:
        state = dataset.state_dict()
    except Exception:
        return None
    return snapshot(state, dataset)


def sampler_state_of(loader: Any) -> dict[str, Any]:
    """A Stateful sampler's own state now (``{}`` for another sampler), for a state between
    epochs: the next epoch starts from it."""
    if loader._kind not in ("map", "async"):
        return {}
    stateful = stateful_sampler(loader)
    return {"sampler_state": snapshot(stateful.state_dict(), stateful)} if stateful is not None else {}


def uses_global_rng(loader: Any) -> bool:
    """Whether the loader draws from torch's global generator (its base seed without
    ``generator=``, or a sampler without a generator of its own)."""
    if loader.generator is None:
        return True
    return loader._kind in ("map", "async") and sampler_generator(loader._index_sampler) is None


def draws_from_global(loader: Any, eager: Mapping[str, Any] | None) -> bool:
    """Whether the loader draws from torch's global generator (:func:`uses_global_rng`), its
    sampler's ``__iter__`` included (``eager``, from :func:`drawn_at_iter`)."""
    return uses_global_rng(loader) or bool(eager and eager.get("global") is not None)


def global_rng_of(loader: Any, eager: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """torch's global generator state now, for a loader that draws from it
    (:func:`draws_from_global`): a resume puts it back, so the run goes on drawing as the
    uninterrupted one did (Lightning saves no RNG)."""
    return {"global_rng": plain(torch.get_rng_state())} if draws_from_global(loader, eager) else {}


def replay_epoch(loader: Any, rng: Any) -> None:
    """Draw a finished epoch's order again from its start state and run it out, so that the
    sampler's generator ends where the epoch left it (a sampler without one is skipped)."""
    gen = sampler_generator(loader._index_sampler) if loader._kind in ("map", "async") else None
    if gen is None or rng is None:
        return
    with torch.random.fork_rng(devices=[]):  # the global generator is the state's (global_rng)
        gen.set_state(as_tensor_state(rng))
        for _ in loader._index_sampler:
            pass


def is_stateful(obj: object) -> bool:
    """torch's ``Stateful`` protocol: ``state_dict()`` and ``load_state_dict()``."""
    return callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))


def stateful_sampler(loader: Any) -> Any:
    """The loader's batch sampler, else its sampler, when it has ``state_dict``/``load_state_dict``."""
    for sampler in (loader.batch_sampler, loader.sampler):
        if sampler is not None and is_stateful(sampler):
            return sampler
    return None


def order_rngs(loader: Any) -> dict[str, torch.Tensor | None]:
    """The states of the generators a sampler may draw its order from: its own (or the one it
    wraps; ``None`` without one) and torch's global one."""
    gen = sampler_generator(loader._index_sampler)
    return {"sampler": gen.get_state() if gen is not None else None, "global": torch.get_rng_state()}


def drawn_at_iter(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any] | None:
    """``None`` when no generator moved between :func:`order_rngs` ``before`` and ``after`` an
    ``iter(sampler)`` call (the order is drawn at the first ``next()``); else the states
    before it of those that moved (as ``bytes``): the call drew the order at once."""
    moved = {
        name: state_bytes(state)
        for name, state in before.items()
        if state is not None and not torch.equal(state, after[name])
    }
    return moved or None


def replay_order(loader: Any, eager: Mapping[str, Any] | None, start: Callable[[Any], Any]) -> Any:
    """``start(loader)`` (the epoch's ``iter(sampler)`` call) for a resumed epoch: for an order
    that call drew (``eager``, from :func:`drawn_at_iter`), made from the generators' states
    before it. The sampler's generator is left as the call leaves it (as the uninterrupted
    epoch's was); torch's global one as it was (``load_state_dict()`` put it back)."""
    if not eager:
        return start(loader)
    with torch.random.fork_rng(devices=[]):
        if eager.get("global") is not None:
            torch.set_rng_state(as_tensor_state(eager["global"]))
        gen = sampler_generator(loader._index_sampler)
        if gen is not None and eager.get("sampler") is not None:
            gen.set_state(as_tensor_state(eager["sampler"]))
        return start(loader)


def sampler_resume(resume: Mapping[str, Any]) -> dict[str, Any]:
    """What a resumed map-style epoch's ``datapipes.Sampler`` loads: the positions to pass
    over and the random state its order is drawn from, except for an order the sampler drew
    at ``iter()`` (``"eager"``), which the loader has drawn again before the graph opens."""
    state = {"yielded": resume["frontier"], "skip": resume["done"], "drawn": resume.get("drawn", True)}
    if not resume.get("eager"):
        state["rng"] = resume["rng"]
        if resume.get("rng_global") is not None:
            state["global_rng"] = resume["rng_global"]
    return state


def sampler_generator(sampler: Any) -> torch.Generator | None:
    """The ``torch.Generator`` a sampler (or one it wraps, under ``.sampler``) draws from."""
    s = sampler
    for _ in range(8):
        if s is None:
            return None
        gen = getattr(s, "generator", None)
        if isinstance(gen, torch.Generator):
            return gen
        s = getattr(s, "sampler", None)
    return None


def restore_generators(loader: Any, generators: Mapping[str, Any] | None) -> None:
    """Put the loader's (``"loader"``) and its sampler's (``"sampler"``) generators in a saved state."""
    if not generators:
        return
    own = loader.generator
    if generators.get("loader") is not None and own is not None:
        own.set_state(as_tensor_state(generators["loader"]))
    if generators.get("sampler") is not None and loader._kind in ("map", "async"):
        sampler = sampler_generator(loader._index_sampler)
        if sampler is not None and sampler is not own:
            sampler.set_state(as_tensor_state(generators["sampler"]))


def loader_config(loader: Any) -> dict[str, Any]:
    """The arguments a state depends on; a state is refused by a loader whose differ."""
    config: dict[str, Any] = {
        "kind": str(loader._kind),  # plain data (a Kind is a StrEnum)
        "batch_size": loader.batch_size,
        "drop_last": loader.drop_last,
    }
    if loader._kind in ("map", "async"):
        config["sampler"] = type(loader.sampler).__name__
        config["batch_sampler"] = type(loader.batch_sampler).__name__ if loader.batch_sampler is not None else None
        try:
            config["batches"] = len(loader._index_sampler)
        except TypeError:
            config["batches"] = None
        try:
            config["samples"] = len(loader.dataset)
        except Exception:  # no length (a custom sampler needs none): not compared
            config["samples"] = None
        # Where the order and the base seeds are drawn from, and how (torch's samplers).
        config["generator"] = loader.generator is not None
        config["sampler_generator"] = sampler_generator(loader._index_sampler) is not None
        order = describe_order(loader)
        if order is not None:  # the rank's own place is no argument: it may change (reshard)
            config["order"] = {k: v for k, v in order.items() if k not in ("rank", "num_replicas", "epoch")}
    elif loader._kind == "iterable":
        # Each worker's share of an IterableDataset depends on how many there are.
        config["workers"] = total_workers(loader)
    return config


#: Config keys that a world-size change may change (Lightning injects a DistributedSampler
#: with more than one rank, and each rank has its share of the batches).
WORLD_DEPENDENT = ("batches", "sampler", "order", "sampler_generator")


def total_workers(loader: Any) -> int:
    """How many workers share an ``IterableDataset``: ``num_workers`` (at least one) in each
    worker process, or in this process without ``worker_processes``."""
    return max(int(loader.num_workers), 1) * max(int(getattr(loader, "worker_processes", 0)), 1)


def check_config(state: Mapping[str, Any], config: Mapping[str, Any], ignore: tuple[str, ...] = ()) -> None:
    """Refuse (``ValueError`` naming each difference) a state taken with other arguments than ``config``."""
    saved = state.get("config")
    if not isinstance(saved, Mapping):
        raise ValueError("state_dict has no 'config': it is not a ThreadLoader.state_dict()")
    # A key the saved config lacks was not recorded by the version that saved it: not compared.
    differ = [
        f"{key}={saved.get(key)!r} there, {config.get(key)!r} here"
        for key in sorted(saved)
        if key not in ignore and saved.get(key) != config.get(key)
    ]
    if differ:
        hint = ""
        if any(d.startswith("workers=") for d in differ):
            hint = (
                " (an IterableDataset is resumed per worker: its own state per worker copy, or the items each"
                " worker read, so num_workers must be the same)"
            )
        raise ValueError("state_dict comes from a ThreadLoader with other arguments: " + "; ".join(differ) + hint)


def _rank_and_world() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def gather_ranks(local: dict[str, Any], *, gather: bool | None = None) -> dict[str, Any]:
    """``local`` as a state; in a process group of several ranks, every rank's (a collective),
    unless ``gather`` is False (then this rank's, marked with its rank)."""
    state = {"format": FORMAT, **local}
    rank, world = _rank_and_world()
    if world == 1:
        return state
    if gather is False:
        return {**state, "rank": rank, "world_size": world}
    return {"format": FORMAT, "world_size": world, "ranks": _all_gather(state, rank, world)}


def _all_gather(state: dict[str, Any], rank: int, world: int) -> list[Any]:
    import torch.distributed as dist

    states: list[Any] = [None] * world
    dist.all_gather_object(states, state)
    return states


def pick_rank(state: Any, loader: Any) -> dict[str, Any]:
    """This rank's part of a state (the state itself when it was taken without a process
    group), checked against ``loader``'s arguments. Taken with another world size, the rest of
    a map-style epoch is dealt out again (:func:`reshard`)."""
    if not isinstance(state, Mapping):
        raise TypeError(f"state_dict must be a mapping from ThreadLoader.state_dict(), got {type(state).__name__}")
    if state.get("format") != FORMAT:
        raise ValueError(
            f"state_dict is not a ThreadLoader state (format {state.get('format')!r}, expected {FORMAT!r})"
        )
    rank, world = _rank_and_world()
    if state.get("ranks") is None and state.get("rank") is not None:  # one rank's, gather=False
        if int(state["rank"]) != rank or int(state.get("world_size", 1)) != world:
            raise ValueError(
                f"state_dict is rank {state['rank']} of {state.get('world_size')}'s (taken with gather=False) and "
                f"this is rank {rank} of {world}: load each rank's own state"
            )
        local = {k: v for k, v in state.items() if k not in ("rank", "world_size")}
        check_config(local, loader_config(loader))
        return local
    ranks = list(state["ranks"]) if state.get("ranks") is not None else [dict(state)]
    config = loader_config(loader)
    if len(ranks) == world:
        local = dict(ranks[rank])
        if local.get("resharded") is not None and not local.get("finished", True):
            resharded = local["resharded"]
            if int(resharded["world_size"]) != world:
                raise ValueError("a state taken after a world-size change resumes with that world size only")
            again = reshard(resharded["from"], rank, world, loader)
            again.update(frontier=local["frontier"], done=local["done"])
            return again
        check_config(local, config)
        return local
    if all(r.get("finished", True) for r in ranks):
        local = dict(ranks[0])
        check_config(local, config, ignore=WORLD_DEPENDENT)
        return local
    return reshard({"format": FORMAT, "ranks": ranks}, rank, world, loader)


def keep_sampler_epoch(loader: Any, order: Mapping[str, Any] | None) -> None:
    """A resumed epoch's ``DistributedSampler`` draws the order of the epoch the state was taken
    in (``order`` from :func:`describe_order`): where ``set_epoch()`` was not called with it
    before ``iter()``, it is set, with a warning (the order would not be the one the delivered
    batches came from: samples repeated and missed)."""
    from torch.utils.data import DistributedSampler

    sampler = loader.sampler
    if not order or order.get("type") != "distributed" or type(sampler) is not DistributedSampler:
        return
    saved = int(order["epoch"])
    if sampler.epoch != saved:
        warnings.warn(
            f"the DistributedSampler's epoch is {sampler.epoch} and the state was taken in its epoch {saved}: the "
            f"resumed epoch draws epoch {saved}'s order (set_epoch({saved}) is called); call set_epoch() with the "
            "epoch being resumed before iter(), as the run that took the state did",
            RuntimeWarning,
            stacklevel=4,
        )
        sampler.set_epoch(saved)


def describe_order(loader: Any) -> dict[str, Any] | None:
    """How to draw the epoch's order again elsewhere: torch's standard samplers under the
    default ``BatchSampler`` (``None`` for any other)."""
    from torch.utils.data import BatchSampler, DistributedSampler, RandomSampler, SequentialSampler

    if loader._kind not in ("map", "async") or type(loader.batch_sampler) is not BatchSampler:
        return None
    s = loader.sampler
    if type(s) is DistributedSampler:
        return {
            "type": "distributed",
            "length": len(s.dataset),  # type: ignore[arg-type]
            "num_replicas": s.num_replicas,
            "rank": s.rank,
            "shuffle": s.shuffle,
            "seed": s.seed,
            "epoch": s.epoch,
            "drop_last": s.drop_last,
        }
    if type(s) is RandomSampler:
        return {
            "type": "random",
            "length": len(s.data_source),
            "replacement": s.replacement,
            "num_samples": s.num_samples,
            "generator": s.generator is not None,
        }
    if type(s) is SequentialSampler:
        return {"type": "sequential", "length": len(s.data_source)}
    return None


def replay_batches(order: Mapping[str, Any], rng: Any, batch_size: int, drop_last: bool) -> list[list[int]]:
    """The index batches of the epoch ``order`` and ``rng`` describe."""
    from torch.utils.data import BatchSampler, DistributedSampler, RandomSampler, SequentialSampler

    data = range(int(order["length"]))
    kind = order["type"]
    sampler: Any
    if kind == "distributed":
        sampler = DistributedSampler(
            data,  # type: ignore[arg-type]
            num_replicas=order["num_replicas"],
            rank=order["rank"],
            shuffle=order["shuffle"],
            seed=order["seed"],
            drop_last=order["drop_last"],
        )
        sampler.set_epoch(order["epoch"])
        indices = list(sampler)
    elif kind == "random" and order["generator"]:
        generator = torch.Generator()
        generator.set_state(as_tensor_state(rng))
        indices = list(RandomSampler(data, order["replacement"], order["num_samples"], generator=generator))
    elif kind == "random":
        with torch.random.fork_rng(devices=[]):
            torch.set_rng_state(as_tensor_state(rng))
            indices = list(RandomSampler(data, order["replacement"], order["num_samples"]))
    else:
        indices = list(SequentialSampler(data))
    return [list(b) for b in BatchSampler(indices, batch_size, drop_last)]


def _delivered(state: Mapping[str, Any]) -> set[int]:
    out = set(range(int(state["frontier"])))
    for start, stop in state["done"]:
        out.update(range(int(start), int(stop)))
    return out


def reshard(state: Mapping[str, Any], rank: int, world: int, loader: Any) -> dict[str, Any]:
    """The rest of a map-style epoch taken on another number of ranks, dealt out to
    ``world`` ranks: every sample no rank delivered, once, across the ranks (order is not
    kept). Each rank gets as many batches as its loader has left by Lightning's count (its
    ``len()`` minus the batches the first old rank delivered), so that every rank steps as
    often; the samples are spread evenly over them (sizes may differ from ``batch_size``)."""
    ranks = list(state["ranks"])
    old = f"{len(ranks)} rank{'s' if len(ranks) > 1 else ''}"
    for r in ranks:
        if r.get("config", {}).get("kind") not in ("map", "async") or r.get("order") is None:
            raise ValueError(
                f"state_dict was taken by {old} and this process group has {world}: a mid-epoch resume with "
                "another world size needs a map-style dataset with torch's SequentialSampler, RandomSampler or "
                "DistributedSampler and the default BatchSampler"
            )
        check_config(r, loader_config(loader), ignore=WORLD_DEPENDENT)
    delivered: set[int] = set()
    left: list[int] = []
    for r in ranks:
        done = _delivered(r)
        config = r["config"]
        for position, batch in enumerate(
            replay_batches(r["order"], r["rng"], config["batch_size"], config["drop_last"])
        ):
            (delivered.update if position in done else left.extend)(batch)
    remaining = list(dict.fromkeys(i for i in left if i not in delivered))
    steps_done = len(_delivered(ranks[0]))
    steps = len(loader._index_sampler) - steps_done
    if steps < 1 and remaining:
        warnings.warn(
            f"state_dict was taken by {old} after {steps_done} batches, and each of this process group's {world} "
            f"ranks has {len(loader._index_sampler)} in an epoch: by that count the epoch is over, so the "
            f"{len(remaining)} samples no rank delivered are dealt out as one batch per rank (a trainer that "
            "counts the epoch as over may not ask for it)",
            RuntimeWarning,
            stacklevel=3,
        )
    steps = max(steps, 1)
    mine = remaining[rank::world]
    batches = [b.tolist() for b in torch.tensor(mine, dtype=torch.int64).tensor_split(steps) if len(b)]
    first = ranks[0]
    # The skips of the epoch so far go on with the new first rank (errors() reports each once).
    carried = [e for r in ranks for e in r.get("errors", ())] if rank == 0 else []
    return {
        "errors": carried,
        "config": loader_config(loader),
        "finished": False,
        "frontier": 0,
        "done": [],
        "rng": first["rng"],
        "base_seed": first["base_seed"],
        "drew_base_seed": first.get("drew_base_seed", True),
        "loader_rng": first.get("loader_rng"),
        "sampler_state": None,
        "resharded": {"from": {"format": FORMAT, "ranks": ranks}, "world_size": world},
        "batches": batches,
    }
