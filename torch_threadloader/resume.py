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

import sys
import threading
import types
import weakref
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

import torch

__all__ = [
    "FORMAT",
    "EpochRecord",
    "check_config",
    "gather_ranks",
    "loader_config",
    "pick_rank",
    "restore_generators",
    "sampler_generator",
    "IterableLedger",
    "NodeLedger",
    "PositionLedger",
    "encode_ranges",
    "find_prefetching_fetcher",
    "plain",
    "tag_error",
    "tag_of",
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
    """``obj`` with tensors as ``bytes`` (a generator state is a ``uint8`` tensor) and tuples
    as lists: data ``torch.load(weights_only=True)`` loads."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes()
    if isinstance(obj, Mapping):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [plain(v) for v in obj]
    return obj


def as_tensor_state(value: Any) -> torch.Tensor:
    """A generator state saved as ``bytes`` (by :func:`plain`) back as a ``uint8`` tensor."""
    if isinstance(value, torch.Tensor):
        return value
    return torch.frombuffer(bytearray(value), dtype=torch.uint8).clone()


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

    def __init__(self, num_workers: int, state: Mapping[str, Any] | None = None) -> None:
        workers = list(state["workers"]) if state else [{} for _ in range(num_workers)]
        self.batches = [int(w.get("batches", 0)) for w in workers]
        self.states: list[Any] = [w.get("state") for w in workers]
        self.ended = [bool(w.get("ended", False)) for w in workers]
        self.turn = int(state.get("turn", 0)) if state else 0
        self.recent: deque[tuple[int, Any, bool]] = deque(maxlen=RECENT)

    def add(self, tag: tuple[int, Any, bool]) -> None:
        worker, state, ended = tag
        self.recent.append((worker, self.states[worker], self.ended[worker]))
        self.batches[worker] += 1
        self.states[worker] = state
        self.ended[worker] = ended
        self.turn = (worker + 1) % len(self.batches)

    def state(self, held: int = 0) -> dict[str, Any]:
        batches, states, ended, turn = list(self.batches), list(self.states), list(self.ended), self.turn
        for worker, before, was_ended in list(self.recent)[::-1][:held]:
            batches[worker] -= 1
            states[worker] = before
            ended[worker] = was_ended
            turn = worker
        workers = [{"batches": b, "state": s, "ended": e} for b, s, e in zip(batches, states, ended, strict=True)]
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
    batch it holds. The fetcher's ``batches`` list says how many it holds when the state is
    taken. Found once per epoch by looking up the caller's frames (no per-batch cost)."""
    frame: types.FrameType | None = sys._getframe(1)
    for _ in range(24):
        if frame is None:
            return None
        owner = frame.f_locals.get("self")
        if owner is not None:
            cls = type(owner)
            if cls.__name__ == "_PrefetchDataFetcher" and cls.__module__.split(".")[0] in (
                "lightning",
                "pytorch_lightning",
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
    ) -> None:
        self.kind: str = loader._kind
        self.lock = threading.Lock()
        self.resume = dict(resume) if resume is not None else None
        self.meta: dict[str, Any] = {
            "base_seed": base_seed,
            "drew_base_seed": drew_base_seed,
            "loader_rng": plain(loader_rng),
            "sampler_state": plain(sampler_state),
        }
        self.fetcher = fetcher
        self.finished = False
        self.it: Any = None
        self.total: int | None = None
        self.ledger: PositionLedger | IterableLedger | NodeLedger
        if self.kind in ("map", "async"):
            # Batches that may come out of order carry their position (also from worker processes).
            self.tagged = self.kind == "async" or loader.num_workers > 0 or bool(getattr(loader, "worker_processes", 0))
            self.ledger = PositionLedger(resume["frontier"], resume["done"]) if resume else PositionLedger()
            self.rng = resume["rng"] if resume else None
            try:
                self.total = len(loader._index_sampler)
            except TypeError:
                self.total = None
        elif self.kind == "iterable":
            self.tagged = True
            self.ledger = IterableLedger(total_workers(loader), resume)
        else:
            self.tagged = True
            self.ledger = NodeLedger(resume["graph"] if resume else {})

    def resume_part(self) -> dict[str, Any] | None:
        return self.resume

    def attach(self, it: Any) -> None:
        self.it = it

    def add(self, tag: Any) -> None:
        with self.lock:
            self.ledger.add(tag)

    def finish(self) -> None:
        with self.lock:
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
                rng = self.rng
                if graph_state is not None:
                    sampler = sampler_state_in(graph_state)
                    rng = sampler["rng"]
                    if not self.tagged:
                        ledger.set_in_order(int(sampler["yielded"]), sampler.get("skip", ()))
                positions = ledger.state(held)
                finished = finished or (self.total is not None and positions["frontier"] >= self.total)
                state.update(positions)
                state["rng"] = plain(rng)
            else:
                state.update(self.ledger.state(held))
                finished = finished or state.pop("all_ended")
        if finished:
            # The epoch is over: the next iter() is a new epoch, drawn from the generators as they are now.
            ended = state
            state = {"config": ended["config"], "finished": True}
            if self.kind == "node":  # its generators are in it: loaded, they draw the next epoch
                state["graph"] = ended["graph"]
            state.update(self.generators_of(loader))
            if loader.persistent_workers and loader.num_workers > 0:
                state["base_seed"] = self.meta["base_seed"]
            return state
        state["finished"] = False
        state.update(self.meta)
        return state

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
        "kind": loader._kind,
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
    elif loader._kind == "iterable":
        # Each worker's share of an IterableDataset depends on how many there are.
        config["workers"] = total_workers(loader)
    return config


def total_workers(loader: Any) -> int:
    """How many workers share an ``IterableDataset``: ``num_workers`` (at least one) in each
    worker process, or in this process without ``worker_processes``."""
    return max(int(loader.num_workers), 1) * max(int(getattr(loader, "worker_processes", 0)), 1)


def check_config(state: Mapping[str, Any], config: Mapping[str, Any]) -> None:
    saved = state.get("config")
    if not isinstance(saved, Mapping):
        raise ValueError("state_dict has no 'config': it is not a ThreadLoader.state_dict()")
    differ = [
        f"{key}={saved.get(key)!r} there, {config.get(key)!r} here"
        for key in sorted(set(saved) | set(config))
        if saved.get(key) != config.get(key)
    ]
    if differ:
        hint = ""
        if any(d.startswith("workers=") for d in differ):
            hint = (
                " (an IterableDataset without state_dict()/load_state_dict() of its own is resumed per worker,"
                " so num_workers must be the same)"
            )
        raise ValueError("state_dict comes from a ThreadLoader with other arguments: " + "; ".join(differ) + hint)


def _rank_and_world() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def gather_ranks(local: dict[str, Any]) -> dict[str, Any]:
    """``local`` as a state; in a process group of several ranks, every rank's (a collective)."""
    state = {"format": FORMAT, **local}
    _, world = _rank_and_world()
    if world == 1:
        return state
    import torch.distributed as dist

    states: list[Any] = [None] * world
    dist.all_gather_object(states, state)
    return {"format": FORMAT, "world_size": world, "ranks": states}


def pick_rank(state: Any) -> dict[str, Any]:
    """This rank's part of a state (the state itself when it was taken without a process group)."""
    if not isinstance(state, Mapping):
        raise TypeError(f"state_dict must be a mapping from ThreadLoader.state_dict(), got {type(state).__name__}")
    if state.get("format") != FORMAT:
        raise ValueError(
            f"state_dict is not a ThreadLoader state (format {state.get('format')!r}, expected {FORMAT!r})"
        )
    ranks = state.get("ranks")
    if ranks is None:
        rank, world = _rank_and_world()
        if world != 1 and not state.get("finished", False):
            raise ValueError(
                f"state_dict was taken by a single process, and this is rank {rank} of {world}: a mid-epoch "
                "state resumes with the world size it was taken with"
            )
        return dict(state)
    rank, world = _rank_and_world()
    if len(ranks) != world:
        raise ValueError(
            f"state_dict was taken by {len(ranks)} ranks and this process group has {world}: a mid-epoch "
            "state resumes with the world size it was taken with"
        )
    return dict(ranks[rank])
