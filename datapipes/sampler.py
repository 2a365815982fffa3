"""Sampler: the indices of one epoch of a map-style dataset."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sized
from typing import Any, cast

import torch
from torch.utils.data import DistributedSampler, RandomSampler, SequentialSampler

from datapipes._rng import state_bytes, state_tensor
from datapipes.base import Node, NodeIterator, StateDict

__all__ = ["Sampler"]


class Sampler(Node[Any]):
    """Yields the indices of one epoch; iterating again is the next epoch.

    The orders are torch's own samplers, reused as they are:

    * ``Sampler(ds)``: ``0 .. len(ds)-1`` (``SequentialSampler``).
    * ``Sampler(ds, shuffle=True, seed=s)`` or ``generator=g``: ``RandomSampler`` drawing from
      that generator, so the same generator gives the same permutations as
      ``torch.utils.data.RandomSampler(ds, generator=g)``, epoch after epoch. Each epoch's
      order is drawn whole at its first ``next()``: torch's iterator draws from the generator
      again when it runs out, so an epoch ended early (threads downstream having read ahead
      more or less) would leave the generator where timing says; here every epoch leaves it
      as a whole one does.
    * ``Sampler(ds, rank=r, world_size=w, shuffle=..., seed=..., drop_last=...)``:
      ``DistributedSampler`` (padding and ``drop_last`` as torch does); call
      :meth:`set_epoch` each epoch, as with torch.
    * ``Sampler(sampler=s)``: any torch ``Sampler``, ``BatchSampler`` or iterable of indices.

    ``dataset`` may be a sized dataset or an ``int`` length. Holds nothing.
    State is the epoch, the count of positions passed (``yielded``), the random state the
    epoch's order was drawn from (the sampler's ``generator``, or torch's global generator for
    a sampler without one), and ``skip``: ranges ``[start, stop)`` of later positions already
    delivered (a consumer that finished items out of order). A resumed epoch draws the same
    order, passes over the positions before ``yielded`` and those in ``skip`` without yielding
    them, and yields exactly the indices that were left.

    With ``positions=True`` each item is ``(position, index)``: the index's position in the
    epoch's order, counted from 0, for a consumer that records which positions it delivered.
    """

    def __init__(
        self,
        dataset: Sized | int | None = None,
        *,
        shuffle: bool = False,
        seed: int | None = None,
        generator: torch.Generator | None = None,
        sampler: Iterable[Any] | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        drop_last: bool = False,
        positions: bool = False,
    ) -> None:
        super().__init__(None)
        self.positions = bool(positions)
        if sampler is not None:
            self.sampler: Iterable[Any] = _given(sampler, dataset, shuffle, seed, generator, rank)
        else:
            self.sampler = _built(dataset, shuffle, seed, generator, rank, world_size, drop_last)
        # A RandomSampler of its own: each epoch's order drawn whole (see the class docstring).
        self._whole = sampler is None and isinstance(self.sampler, RandomSampler)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch of a distributed (or any ``set_epoch``-aware) sampler."""
        self.epoch = int(epoch)
        set_epoch = getattr(self.sampler, "set_epoch", None)
        if set_epoch is not None:
            set_epoch(self.epoch)

    def __len__(self) -> int:
        if not isinstance(self.sampler, Sized):
            raise TypeError(f"{type(self.sampler).__name__} has no len()")
        return len(self.sampler)

    def _generator(self) -> torch.Generator | None:
        s: Any = self.sampler
        while s is not None:
            gen = getattr(s, "generator", None)
            if isinstance(gen, torch.Generator):
                return gen
            s = getattr(s, "sampler", None)
        return None

    def _order(self) -> Iterator[Any]:
        """One epoch's indices, drawn from the random state as it is now."""
        return iter(list(self.sampler)) if self._whole else iter(self.sampler)

    def _open(self, state: StateDict | None) -> NodeIterator[Any]:
        return _SamplerIterator(self, state)

    def __repr__(self) -> str:
        return f"Sampler({type(self.sampler).__name__})"


class _SamplerIterator(NodeIterator[Any]):
    def __init__(self, node: Sampler, state: StateDict | None) -> None:
        self._node = node
        self._stats = node._stats
        self._positions = node.positions
        self._yielded = 0  # positions passed (handed out, or skipped by a resume)
        self._skipped = 0  # by a resume: not handed out, not counted in stats
        self._skip: list[tuple[int, int]] = []  # ranges of later positions not to yield, ascending
        self._rng: torch.Tensor | None = None
        # torch's global generator at the first draw, for a sampler with a generator of its
        # own (``_rng``) that may also draw from the global one there; else None.
        self._global: torch.Tensor | None = None
        # ``_rng`` and ``_global`` as bytes, made at the first state_dict() after the draw (they
        # do not change after it; a state is taken per item pulled).
        self._drawn_bytes: tuple[bytes, bytes | None] | None = None
        self._it: Iterator[Any] | None = None
        if state:
            if "epoch" in state and int(state["epoch"]) != node.epoch:
                node.set_epoch(int(state["epoch"]))
            rng, global_rng = state.get("rng"), state.get("global_rng")
            self._rng = None if rng is None else state_tensor(rng)
            self._global = None if global_rng is None else state_tensor(global_rng)
            gen = node._generator()
            if state.get("drawn") is False:
                # Taken before the order was drawn: draw it at the first next(), as a fresh
                # epoch would, from torch's global generator as it is (the run that resumes
                # put it back) and from the sampler's own as the state has it.
                if gen is not None and self._rng is not None:
                    gen.set_state(self._rng)
                self._rng = self._global = None
            yielded = int(state.get("yielded", 0))
            self._skip = [(max(a, yielded), b) for a, b in _decode_ranges(state.get("skip", ())) if b > yielded]
            self._resume(yielded)
            if self._it is not None:
                self._drop_passed()

    def _start(self) -> Iterator[Any]:
        # The order is drawn at the sampler's first next(); take the random state right then,
        # not at iter(), so draws made in between (a loader's base seed) are not replayed.
        if self._rng is None:
            self._rng = self._current_rng()
            if self._node._generator() is not None:
                self._global = torch.get_rng_state()
        return self._node._order()

    def _resume(self, skip: int) -> None:
        gen = self._node._generator()
        if self._rng is None:
            if skip == 0 and not self._skip:
                return  # not drawn yet, nothing to pass over: drawn at the first next()
            self._it = self._start()
        elif gen is not None and self._global is None:
            gen.set_state(self._rng)
            self._it = self._node._order()
        else:
            # Replay the global generator's state for the first draw only, then restore it
            # (a generator of the sampler's own is left as the draw leaves it).
            with torch.random.fork_rng(devices=[]):
                if gen is not None and self._global is not None:
                    gen.set_state(self._rng)
                    torch.set_rng_state(self._global)
                else:
                    torch.set_rng_state(self._rng)
                it = self._node._order()
                first = list(itertools.islice(it, 1))
            self._it = itertools.chain(first, it)
        for _ in itertools.islice(self._it, skip):
            self._yielded += 1
        self._skipped = self._yielded

    def _drop_passed(self) -> None:
        """Pass over the positions in ``skip`` that come next (a resume's delivered ones)."""
        skip, it = self._skip, self._it
        assert it is not None
        while skip and skip[0][0] <= self._yielded:
            _, stop = skip.pop(0)
            for _ in itertools.islice(it, stop - self._yielded):
                self._yielded += 1
                self._skipped += 1
            if self._yielded < stop:  # the sampler ended early
                skip.clear()

    def __next__(self) -> Any:
        it = self._it
        if it is None:
            it = self._it = self._start()
        index = next(it)
        position = self._yielded
        self._yielded += 1
        if self._skip:
            self._drop_passed()
        return (position, index) if self._positions else index

    def raw(self) -> tuple[Iterator[Any], int] | None:
        """The started iterator of indices, for a consumer in the same thread that pulls it
        directly (no call of this iterator's ``__next__`` per index) and reports how many it
        took with :meth:`consumed`; and the count so far. ``None`` when items are not the
        sampler's own indices (``positions=True``, or a resume with positions to skip)."""
        if self._positions or self._skip:
            return None
        it = self._it
        if it is None:
            it = self._it = self._start()
        return it, self._yielded

    def consumed(self, count: int) -> None:
        """``count`` indices have been taken in all this epoch (see :meth:`raw`)."""
        self._yielded = count

    def state_dict(self) -> StateDict:
        rng_bytes, global_bytes = self._rng_bytes()
        state: StateDict = {
            "epoch": self._node.epoch,
            "yielded": self._yielded,
            "rng": rng_bytes,
            "drawn": self._rng is not None,
        }
        if global_bytes is not None:
            state["global_rng"] = global_bytes
        if self._skip:
            state["skip"] = [list(r) for r in self._skip]
        return state

    def _rng_bytes(self) -> tuple[bytes, bytes | None]:
        """The random states the order is drawn from, as bytes: those of the draw once it
        is made (computed once), else the states as they are now (the order will be drawn
        from them; the generator may be epochs ahead of a fresh one that loads the state)."""
        rng, global_rng = self._rng, self._global
        if rng is not None:
            drawn = self._drawn_bytes
            if drawn is None:
                drawn = self._drawn_bytes = (state_bytes(rng), None if global_rng is None else state_bytes(global_rng))
            return drawn
        rng = self._current_rng()
        global_rng = torch.get_rng_state() if self._node._generator() is not None else None
        return state_bytes(rng), None if global_rng is None else state_bytes(global_rng)

    def _current_rng(self) -> torch.Tensor:
        gen = self._node._generator()
        return gen.get_state() if gen is not None else torch.get_rng_state()

    def close(self) -> None:
        self._it = iter(())
        self._skip = []
        out, self._skipped = self._yielded - self._skipped, self._yielded
        if out:
            self._stats.add(items_out=out)


def _decode_ranges(ranges: Iterable[Any]) -> list[tuple[int, int]]:
    """``[[start, stop), ...]`` as sorted, merged ``(start, stop)`` pairs; refuses bad ones."""
    pairs = []
    for r in ranges:
        start, stop = (int(v) for v in r)
        if not 0 <= start < stop:
            raise ValueError(f"skip: a range must be [start, stop) with 0 <= start < stop, got {list(r)!r}")
        pairs.append((start, stop))
    pairs.sort()
    merged: list[tuple[int, int]] = []
    for start, stop in pairs:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], stop))
        else:
            merged.append((start, stop))
    return merged


def _given(
    sampler: Iterable[Any],
    dataset: Sized | int | None,
    shuffle: bool,
    seed: int | None,
    generator: torch.Generator | None,
    rank: int | None,
) -> Iterable[Any]:
    """``Sampler(sampler=s)``: ``s`` itself, checked; nothing else may be given."""
    if dataset is not None or shuffle or seed is not None or generator is not None or rank is not None:
        raise ValueError("sampler is mutually exclusive with dataset, shuffle, seed, generator and rank")
    if not isinstance(sampler, Iterable):
        raise TypeError(f"sampler must be an iterable of indices, got {type(sampler).__name__}")
    return sampler


def _built(
    dataset: Sized | int | None,
    shuffle: bool,
    seed: int | None,
    generator: torch.Generator | None,
    rank: int | None,
    world_size: int | None,
    drop_last: bool,
) -> Iterable[Any]:
    """The torch sampler over ``dataset``: distributed (``rank``/``world_size``, seeded with
    ``seed``), random (from ``generator``, or a new one seeded with ``seed`` or at random), or
    sequential; the arguments checked, each error naming them."""
    if dataset is None:
        raise TypeError("Sampler needs a dataset (or its length as an int) or sampler=")
    data: Sized = range(dataset) if isinstance(dataset, int) else dataset
    if not isinstance(data, Sized):
        raise TypeError(f"dataset must be sized (have __len__) or an int, got {type(dataset).__name__}")
    if seed is not None and generator is not None:
        raise ValueError("pass seed or generator, not both")
    if (rank is None) != (world_size is None):
        raise ValueError("rank and world_size go together: pass both for distributed sampling")
    if rank is not None and world_size is not None:
        if generator is not None:
            raise ValueError("distributed sampling is seeded with seed=, not generator=")
        return DistributedSampler(
            cast(Any, data),  # any sized dataset: DistributedSampler only takes its len()
            num_replicas=world_size,
            rank=rank,
            shuffle=shuffle,
            seed=seed or 0,
            drop_last=drop_last,
        )
    if not shuffle:
        return SequentialSampler(data)
    if generator is None:
        generator = torch.Generator()
        if seed is None:
            generator.seed()
        else:
            generator.manual_seed(seed)
    return RandomSampler(data, generator=generator)
