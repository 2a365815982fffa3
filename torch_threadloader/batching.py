"""Index batches as torch's ``BatchSampler`` cuts them, with less work per index."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Any

from torch.utils.data import BatchSampler

__all__ = ["FastBatches", "fast_batches"]


class FastBatches(Iterable[list[Any]]):
    """The batches of a ``torch.utils.data.BatchSampler``: the same lists, in the same order,
    drawing from the same sampler. ``BatchSampler`` calls ``next()`` once per index in Python;
    this cuts each batch with ``itertools.islice``, in C. Keeps ``sampler`` (so the sampler's
    generator can be found for checkpoints) and ``len()``."""

    def __init__(self, batch_sampler: BatchSampler) -> None:
        self.batch_sampler = batch_sampler
        self.sampler = batch_sampler.sampler
        self.batch_size = batch_sampler.batch_size
        self.drop_last = batch_sampler.drop_last

    def __iter__(self) -> Iterator[list[Any]]:
        indices = iter(self.sampler)
        size, drop_last = self.batch_size, self.drop_last
        while batch := list(itertools.islice(indices, size)):
            if drop_last and len(batch) < size:
                return
            yield batch

    def __len__(self) -> int:
        return len(self.batch_sampler)


def fast_batches(index_sampler: Iterable[Any]) -> Iterable[Any]:
    """:class:`FastBatches` for a plain ``BatchSampler`` (not a subclass, whose ``__iter__``
    may differ); any other sampler as it is."""
    if type(index_sampler) is BatchSampler:
        return FastBatches(index_sampler)
    return index_sampler
