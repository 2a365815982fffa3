"""Per-sample random draws: a generator of (seed, epoch, sample index), and a block within
which, on the calling thread, the process-global random calls act on it.

:func:`sample_draws` is :class:`~torch_threadloader.random_state.drawing` of the sample's
state: torch's random functions called without ``generator=`` on CPU draw from the sample's
generator, ``torch.manual_seed`` and ``get_rng_state``/``set_rng_state`` act on it, and
Python's ``random`` and NumPy's ``np.random`` on generators seeded from it. torch's global
generator is not touched, and other threads are not affected. ``ThreadLoader(per_sample_rng=True)``
runs each item in such a block (and gives it a ``WorkerInfo.rng`` of the sample; see
``docs/guide.md``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch

from torch_threadloader.random_state import WorkerRNG, current_rng, drawing, sample_seed

__all__ = ["current_generator", "sample_draws", "sample_generator"]


def sample_generator(seed: int, epoch: int, index: int) -> torch.Generator:
    """A fresh CPU ``torch.Generator`` seeded with the 64-bit BLAKE2b hash of
    ``(seed, epoch, index)`` (so nearby triples give unrelated streams; about 3 us). Each must
    be an int >= 0."""
    for name, value in (("seed", seed), ("epoch", epoch), ("index", index)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
            raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    return torch.Generator().manual_seed(sample_seed(seed, epoch, index))


def current_generator() -> torch.Generator | None:
    """The generator of the innermost :func:`sample_draws` block on this thread, else ``None``.

    A user's own random transform either calls torch's random functions without
    ``generator=`` (the block supplies this one), or draws from this generator explicitly, e.g.
    to seed Python's or NumPy's generators for that one sample. Not
    ``torch.random.thread_safe_generator()`` outside such a block: in a loader thread that is the
    worker's generator, whose draws depend on which worker loads the sample."""
    rng = current_rng()
    return rng.torch_generator if rng is not None and rng.sample else None


@contextmanager
def sample_draws(generator: torch.Generator) -> Iterator[torch.Generator]:
    """Within the block, on the calling thread, torch's random functions called without
    ``generator=`` on CPU draw from ``generator`` (and the process-global random calls act on
    the sample's state; see the module). Other threads are not affected."""
    if not isinstance(generator, torch.Generator) or generator.device.type != "cpu":
        raise ValueError(f"generator must be a CPU torch.Generator, got {generator!r}")
    outer = current_rng()
    with drawing(WorkerRNG.for_sample(generator, outer.owner if outer is not None else "")):
        yield generator
