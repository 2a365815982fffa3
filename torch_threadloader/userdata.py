"""Names for the user's own objects, which the loader carries without looking inside: a sample
as the dataset returns it, a batch as ``collate_fn`` returns it, an index as the sampler yields
it. Each is ``Any`` on purpose, as in torch's own ``DataLoader``: a value the loader makes
itself (a tag, a state, a message) has a type of its own. A bottom module: it imports nothing
of the package."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeAlias

__all__ = ["Batch", "CollateFn", "Index", "Indices", "Sample", "UserObject"]

#: One sample as the dataset returns it (``__getitem__``, an async fetch, an iterator's item).
Sample: TypeAlias = Any
#: What ``collate_fn`` returns for a list of samples (or a sample itself, without batching).
Batch: TypeAlias = Any
#: A key the sampler yields and ``__getitem__`` receives.
Index: TypeAlias = Any
#: What the loader's index sampler yields for one batch: the batch sampler's indices (a list,
#: usually), or one :data:`Index` without auto-collation (``batch_size=None``).
Indices: TypeAlias = Any
#: Another object of the user's: a dataset, sampler, generator or callable the loader was given.
UserObject: TypeAlias = Any
#: ``collate_fn``: a batch from a list of samples (without auto-collation, from one sample).
CollateFn: TypeAlias = Callable[[list[Sample]], Batch]
