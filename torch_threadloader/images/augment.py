"""Random transforms that draw from a generator of (seed, epoch, sample index).

torchvision's v2 transforms draw their parameters with torch's random functions
(``torch.rand``, ``torch.randint``, ``torch.empty(1).uniform_()``, ``torch.randperm``, ...)
and no ``generator=``, so in threads they all share torch's one global generator and the draws
depend on which thread got there first. :func:`sample_draws` enters a
``torch.overrides.TorchFunctionMode`` (torch keeps the mode stack per thread) that passes
``generator=`` to every random function called without one, on CPU tensors: within the block,
on this thread only, every such draw comes from the given generator. Nothing in torchvision
changes; any v2 pipeline works as it is.

What it does not reach: Python's ``random`` and NumPy's global generator (no v2 transform uses
them in the torchvision this was checked on; a test greps for it), random ops on accelerator
tensors (a CPU generator cannot serve them; they draw from the device's global generator), and
random draws made inside a C++ op without a ``generator`` argument.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Generic, TypeVar

import numpy as np
import torch
from torch.overrides import TorchFunctionMode
from torch.utils.data import Dataset

__all__ = ["Augmented", "EpochCounter", "RANDOM_FUNCTIONS", "current_generator", "sample_draws", "sample_generator"]

T_co = TypeVar("T_co", covariant=True)

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


class EpochCounter:
    """The epoch a dataset draws for, shared by its shallow copies (ThreadLoader gives each
    worker thread one), so ``set_epoch`` on the dataset reaches every worker, persistent ones
    included. Reads and writes are under a lock."""

    __slots__ = ("_epoch", "_lock")

    def __init__(self, epoch: int = 0) -> None:
        self._lock = threading.Lock()
        self._epoch = 0
        self.set(epoch)

    def set(self, epoch: int) -> None:
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ValueError(f"epoch must be an int >= 0, got {epoch!r}")
        with self._lock:
            self._epoch = epoch

    def get(self) -> int:
        with self._lock:
            return self._epoch

    def __deepcopy__(self, memo: dict[int, Any]) -> EpochCounter:
        return EpochCounter(self.get())

    def __reduce__(self) -> tuple[type[EpochCounter], tuple[int]]:
        return EpochCounter, (self.get(),)


class Augmented(Dataset[Any], Generic[T_co]):
    """``transform(dataset[index])``, its random draws taken from
    ``sample_generator(seed, epoch, index)``: the same ``seed`` and epoch give the same items
    whatever thread, worker count, ``item_concurrency`` or timing loads them, and after a
    resume (the draws depend on nothing else).

    Call :meth:`set_epoch` before each epoch's ``iter(loader)`` (as with
    ``DistributedSampler``); it reaches the worker threads' copies of the dataset. ``len`` and
    indexing are the wrapped dataset's.
    """

    def __init__(self, dataset: Dataset[T_co], transform: Callable[[Any], Any], *, seed: int) -> None:
        if not callable(transform):
            raise TypeError(f"transform must be callable, got {type(transform).__name__}")
        sample_generator(seed, 0, 0)  # validates seed
        self.dataset = dataset
        self.transform = transform
        self.seed = seed
        self.epoch = EpochCounter()

    def set_epoch(self, epoch: int) -> None:
        """Draw for ``epoch`` (an int >= 0) from now on."""
        self.epoch.set(epoch)

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> Any:
        item = self.dataset[index]
        with sample_draws(sample_generator(self.seed, self.epoch.get(), index)):
            return self.transform(item)
