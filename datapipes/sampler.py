"""Sampler: the indices of one epoch of a map-style dataset."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sized
from typing import Any, cast

import torch
from torch.utils.data import DistributedSampler, RandomSampler, SequentialSampler

from datapipes.base import Node, NodeIterator, StateDict

__all__ = ["Sampler"]


class Sampler(Node[Any]):
    """Yields the indices of one epoch; iterating again is the next epoch.

    The orders are torch's own samplers, reused as they are:

    * ``Sampler(ds)``: ``0 .. len(ds)-1`` (``SequentialSampler``).
    * ``Sampler(ds, shuffle=True, seed=s)`` or ``generator=g``: ``RandomSampler`` drawing from
      that generator, so the same generator gives the same permutations as
      ``torch.utils.data.RandomSampler(ds, generator=g)``, epoch after epoch.
    * ``Sampler(ds, rank=r, world_size=w, shuffle=..., seed=..., drop_last=...)``:
      ``DistributedSampler`` (padding and ``drop_last`` as torch does); call
      :meth:`set_epoch` each epoch, as with torch.
    * ``Sampler(sampler=s)``: any torch ``Sampler``, ``BatchSampler`` or iterable of indices.

    ``dataset`` may be a sized dataset or an ``int`` length. Holds nothing.
    State is the epoch, the count yielded, and the random state the epoch's order was drawn
    from (the sampler's ``generator``, or torch's global generator for a sampler without
    one), so a resumed epoch yields exactly the indices that were left.
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
    ) -> None:
        super().__init__(None)
        if sampler is not None:
            if dataset is not None or shuffle or seed is not None or generator is not None or rank is not None:
                raise ValueError("sampler is mutually exclusive with dataset, shuffle, seed, generator and rank")
            if not isinstance(sampler, Iterable):
                raise TypeError(f"sampler must be an iterable of indices, got {type(sampler).__name__}")
            self.sampler: Iterable[Any] = sampler
        else:
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
                self.sampler = DistributedSampler(
                    cast(Any, data),  # any sized dataset: DistributedSampler only takes its len()
                    num_replicas=world_size,
                    rank=rank,
                    shuffle=shuffle,
                    seed=seed or 0,
                    drop_last=drop_last,
                )
            elif shuffle:
                if generator is None:
                    generator = torch.Generator()
                    if seed is None:
                        generator.seed()
                    else:
                        generator.manual_seed(seed)
                self.sampler = RandomSampler(data, generator=generator)
            else:
                self.sampler = SequentialSampler(data)
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

    def _open(self, state: StateDict | None) -> NodeIterator[Any]:
        return _SamplerIterator(self, state)

    def __repr__(self) -> str:
        return f"Sampler({type(self.sampler).__name__})"


class _SamplerIterator(NodeIterator[Any]):
    def __init__(self, node: Sampler, state: StateDict | None) -> None:
        self._node = node
        self._stats = node._stats
        self._yielded = 0
        self._skipped = 0  # by a resume: not handed out, not counted in stats
        self._rng: torch.Tensor | None = None
        self._it: Iterator[Any] | None = None
        if state:
            if "epoch" in state and int(state["epoch"]) != node.epoch:
                node.set_epoch(int(state["epoch"]))
            self._rng = state.get("rng")
            self._resume(int(state.get("yielded", 0)))

    def _start(self) -> Iterator[Any]:
        # The order is drawn at the sampler's first next(); take the random state right then,
        # not at iter(), so draws made in between (a loader's base seed) are not replayed.
        if self._rng is None:
            self._rng = self._current_rng()
        return iter(self._node.sampler)

    def _resume(self, skip: int) -> None:
        gen = self._node._generator()
        if self._rng is None:
            self._it = self._start()
        elif gen is not None:
            gen.set_state(self._rng)
            self._it = iter(self._node.sampler)
        else:
            # Replay the global generator's state for the first draw only, then restore it.
            with torch.random.fork_rng(devices=[]):
                torch.set_rng_state(self._rng)
                it = iter(self._node.sampler)
                first = list(itertools.islice(it, 1))
            self._it = itertools.chain(first, it)
        for _ in itertools.islice(self._it, skip):
            self._yielded += 1
        self._skipped = self._yielded

    def __next__(self) -> Any:
        it = self._it
        if it is None:
            it = self._it = self._start()
        index = next(it)
        self._yielded += 1
        return index

    def raw(self) -> tuple[Iterator[Any], int]:
        """The started iterator of indices, for a consumer in the same thread that pulls it
        directly (no call of this iterator's ``__next__`` per index) and reports how many it
        took with :meth:`consumed`; and the count so far."""
        it = self._it
        if it is None:
            it = self._it = self._start()
        return it, self._yielded

    def consumed(self, count: int) -> None:
        """``count`` indices have been taken in all this epoch (see :meth:`raw`)."""
        self._yielded = count

    def state_dict(self) -> StateDict:
        rng = self._rng
        if rng is None:
            # Not drawn yet: the order will be drawn from the random state as it is now
            # (the generator may be epochs ahead of a fresh one that loads this state).
            rng = self._current_rng()
        return {"epoch": self._node.epoch, "yielded": self._yielded, "rng": rng}

    def _current_rng(self) -> torch.Tensor:
        gen = self._node._generator()
        return gen.get_state() if gen is not None else torch.get_rng_state()

    def close(self) -> None:
        self._it = iter(())
        out, self._skipped = self._yielded - self._skipped, self._yielded
        if out:
            self._stats.add(items_out=out)
