"""Index batches as torch's ``BatchSampler`` cuts them, with less work per index; whether a
sampler may be pulled off the consumer's thread."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from torch.utils.data import (
    BatchSampler,
    DistributedSampler,
    RandomSampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)

from torch_threadloader.userdata import Index

if TYPE_CHECKING:
    from torch_threadloader.inputs import EpochInputs

__all__ = ["FastBatches", "fast_batches", "pulls_anywhere"]

#: torch's samplers that draw their order when iterated, or from a generator of their own.
_OWN_DRAWS = (SequentialSampler, RandomSampler, SubsetRandomSampler, WeightedRandomSampler, DistributedSampler)


def pulls_anywhere(inputs: EpochInputs | None) -> bool:
    """Whether the loader's index sampler may be pulled on a worker thread, not only in
    ``next()`` on the consumer's thread (where torch pulls it; always there for ``None``, a
    worker process's spec, whose indices are its inbox): torch's own samplers (in
    torch's ``BatchSampler``), which draw nothing mid-epoch from a generator another thread
    draws from. A user's sampler may draw from torch's global generator as it yields, between
    the training step's own draws: it is pulled where torch pulls it, so the same seed gives
    the same batches and the same draws in the step."""
    if inputs is None:
        return False
    batch_sampler = inputs.batch_sampler
    if batch_sampler is not None and type(batch_sampler) is not BatchSampler:
        return False
    sampler = inputs.sampler
    if type(sampler) not in _OWN_DRAWS:
        return False
    if isinstance(sampler, RandomSampler) and sampler.generator is not None:
        # It draws again mid-epoch (with replacement, or past one pass) from the user's generator.
        return not sampler.replacement and sampler.num_samples <= len(sampler.data_source)
    return True


class FastBatches(Iterable[list[Index]]):
    """The batches of a ``torch.utils.data.BatchSampler``: the same lists, in the same order,
    drawing from the same sampler. ``BatchSampler`` calls ``next()`` once per index in Python;
    this cuts each batch with ``itertools.islice``, in C. Keeps ``sampler`` (so the sampler's
    generator can be found for checkpoints) and ``len()``."""

    def __init__(self, batch_sampler: BatchSampler) -> None:
        self.batch_sampler = batch_sampler
        self.sampler = batch_sampler.sampler
        self.batch_size = batch_sampler.batch_size
        self.drop_last = batch_sampler.drop_last

    def __iter__(self) -> Iterator[list[Index]]:
        indices = iter(self.sampler)
        size, drop_last = self.batch_size, self.drop_last
        if size == 1:  # no slice to make: a third of the batch's cost at this size
            for index in indices:
                yield [index]
            return
        while batch := list(itertools.islice(indices, size)):
            if drop_last and len(batch) < size:
                return
            yield batch

    def __len__(self) -> int:
        return len(self.batch_sampler)


def fast_batches(index_sampler: Iterable[Index]) -> Iterable[Index]:
    """:class:`FastBatches` for a plain ``BatchSampler`` (not a subclass, whose ``__iter__``
    may differ); any other sampler as it is."""
    if type(index_sampler) is BatchSampler:
        return FastBatches(index_sampler)
    return index_sampler
