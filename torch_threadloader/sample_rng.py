"""Per-sample random draws: a generator of (seed, epoch, sample index), and a block within
which, on the calling thread, torch's random functions draw from it.

torch's global generator is one object shared by every thread; its state cannot be forked per
thread (``torch.random.fork_rng`` sets and restores the *global* state, so two threads in it at
once overwrite each other's). :func:`sample_draws` does not touch it: it enters a
``torch.overrides.TorchFunctionMode`` (torch keeps the mode stack per thread) that passes
``generator=`` to every random function called without one, on CPU tensors. What it does not
reach: Python's ``random`` and NumPy's global generators (module-level state of their own,
not per thread), random ops on accelerator tensors, and draws made inside a C++ op without a
``generator`` argument. ``ThreadLoader(per_sample_rng=True)`` runs each item in such a block
(and gives it a ``WorkerInfo.rng`` of the sample; see ``docs/guide.md``).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from torch.overrides import TorchFunctionMode

__all__ = ["RANDOM_FUNCTIONS", "current_generator", "sample_draws", "sample_generator"]

#: The random functions given the sample's generator when called without one.
RANDOM_FUNCTIONS: frozenset[Callable[..., Any]] = frozenset(
    {
        torch.rand,
        torch.randn,
        torch.randint,
        torch.randperm,
        torch.bernoulli,
        torch.multinomial,
        torch.normal,
        torch.poisson,
        torch.rand_like,
        torch.randn_like,
        torch.randint_like,
        torch.Tensor.uniform_,
        torch.Tensor.normal_,
        torch.Tensor.random_,
        torch.Tensor.bernoulli_,
        torch.Tensor.exponential_,
        torch.Tensor.geometric_,
        torch.Tensor.log_normal_,
        torch.Tensor.cauchy_,
        torch.Tensor.bernoulli,
        torch.Tensor.multinomial,
    }
)

_local = threading.local()


def sample_generator(seed: int, epoch: int, index: int) -> torch.Generator:
    """A fresh CPU ``torch.Generator`` seeded with the 64-bit BLAKE2b hash of
    ``(seed, epoch, index)`` (so nearby triples give unrelated streams; about 3 us). Each must
    be an int >= 0."""
    for name, value in (("seed", seed), ("epoch", epoch), ("index", index)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
            raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    digest = hashlib.blake2b(f"{int(seed)},{int(epoch)},{int(index)}".encode(), digest_size=8).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest, "little"))


def current_generator() -> torch.Generator | None:
    """The generator of the innermost :func:`sample_draws` block on this thread, else ``None``.

    A user's own random transform either calls torch's random functions without
    ``generator=`` (the block supplies this one), or draws from this generator explicitly, e.g.
    to seed Python's or NumPy's generators for that one sample. Not
    ``torch.random.thread_safe_generator()``: in a loader thread that is the worker's generator,
    whose draws depend on which worker loads the sample."""
    stack: list[torch.Generator] = getattr(_local, "stack", [])
    return stack[-1] if stack else None


class _SampleDraws(TorchFunctionMode):
    def __init__(self, generator: torch.Generator) -> None:
        super().__init__()
        self.generator = generator

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        if func in RANDOM_FUNCTIONS:
            kwargs = kwargs or {}
            if kwargs.get("generator") is None and _on_cpu(args, kwargs):
                kwargs = {**kwargs, "generator": self.generator}
        # Every torch call of the block passes here: the common case is one test and the call.
        return func(*args, **kwargs) if kwargs else func(*args)


def _on_cpu(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    for value in args:
        if isinstance(value, torch.Tensor):
            return value.device.type == "cpu"
    device = kwargs.get("device")
    return device is None or torch.device(device).type == "cpu"


@contextmanager
def sample_draws(generator: torch.Generator) -> Iterator[torch.Generator]:
    """Within the block, on the calling thread, torch's random functions called without
    ``generator=`` on CPU draw from ``generator``. Other threads are not affected."""
    if not isinstance(generator, torch.Generator) or generator.device.type != "cpu":
        raise ValueError(f"generator must be a CPU torch.Generator, got {generator!r}")
    stack: list[torch.Generator] = _local.__dict__.setdefault("stack", [])
    stack.append(generator)
    try:
        with _SampleDraws(generator):
            yield generator
    finally:
        stack.pop()
