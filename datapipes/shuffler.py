"""Shuffler: a buffered, seeded shuffle of a stream."""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Any, TypeVar

import torch

from datapipes._rng import state_bytes, state_tensor
from datapipes._sync import SyncIterator
from datapipes._validate import check_positive_int
from datapipes.base import Node, NodeIterator, StateDict

__all__ = ["Shuffler"]

T = TypeVar("T")


class Shuffler(Node[T]):
    """Yields the source's items in a random order drawn from a buffer of ``buffer_size``.

    Bounded by ``buffer_size`` items held. Each ``next()`` fills the buffer from the source and
    yields one buffered item chosen uniformly. Each epoch draws its own seed from a generator
    seeded with ``seed`` (nondeterministic when ``None``), so the same seed gives the same
    orders epoch after epoch; ``state_dict()`` holds the buffer, the epoch's random state and
    the seed generator's, so a resumed epoch makes the same draws, and so do the epochs after it.
    """

    def __init__(self, source: Node[T] | Iterable[T], buffer_size: int, *, seed: int | None = None) -> None:
        super().__init__(source)
        self.buffer_size = check_positive_int("buffer_size", buffer_size)
        self._generator = torch.Generator()
        if seed is None:
            self._generator.seed()
        else:
            self._generator.manual_seed(seed)

    def _open(self, state: StateDict | None) -> NodeIterator[T]:
        rng = random.Random()
        with self._state_lock:
            if state and "rng" in state:
                rng.setstate(_as_rng_state(state["rng"]))
                if state.get("generator") is not None:
                    self._generator.set_state(state_tensor(state["generator"]))
            else:
                rng.seed(int(torch.randint(2**62, (), generator=self._generator)))
            # The seeds of the epochs after this one are drawn from here on.
            generator_state = self._generator.get_state()
        return _ShufflerIterator(self, state, rng, generator_state)


class _ShufflerIterator(SyncIterator[T]):
    _node: Shuffler[T]

    def __init__(
        self, node: Shuffler[T], state: StateDict | None, rng: random.Random, generator_state: torch.Tensor
    ) -> None:
        super().__init__(node, state)
        self._rng = rng
        self._generator_state = generator_state
        self._buffer: list[Any] = list(state.get("buffer", ())) if state else []
        self._source_done = bool(state.get("source_done", False)) if state else False

    def _next(self) -> T:
        buffer = self._buffer
        size = self._node.buffer_size
        while not self._source_done and len(buffer) < size:
            try:
                buffer.append(self._pull())
            except StopIteration:
                self._source_done = True
        self._stats.peak(len(buffer))
        if not buffer:
            raise StopIteration
        i = self._rng.randrange(len(buffer))
        buffer[i], buffer[-1] = buffer[-1], buffer[i]
        item: T = buffer.pop()
        return item

    def state_dict(self) -> StateDict:
        return {
            "source": self._source.state_dict(),
            "buffer": list(self._buffer),
            "rng": self._rng.getstate(),
            "generator": state_bytes(self._generator_state),
            "source_done": self._source_done,
        }


def _as_rng_state(state: Any) -> tuple[Any, ...]:
    # random.Random.getstate() is (version, tuple_of_ints, gauss); a round trip through a
    # serializer may turn the tuples into lists.
    version, internal, gauss = state
    return (version, tuple(internal), gauss)
