"""Random transforms that draw from a generator of (seed, epoch, sample index).

torchvision's v2 transforms draw their parameters with torch's random functions
(``torch.rand``, ``torch.randint``, ``torch.empty(1).uniform_()``, ``torch.randperm``, ...)
and no ``generator=``, from the global generator: in a loader worker, the worker's own (as in
a worker process), so the draws depend on which worker loads the item. :func:`sample_draws` is
a block of the sample's own random state: within it, on this thread only, every such draw on
CPU comes from the given generator, and Python's ``random`` and NumPy's ``np.random`` from
generators seeded from it (see :mod:`torch_threadloader.random_state`). Nothing in torchvision
changes; any v2 pipeline works as it is.

What it does not reach: random ops on accelerator tensors (a CPU generator cannot serve them;
they draw from the device's global generator), and random draws made inside a C++ op without a
``generator`` argument (each named once in a ``WorkerRandomStateWarning`` in a loader worker).
"""

from __future__ import annotations

import itertools
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from torch.utils.data import Dataset

from torch_threadloader.sample_rng import current_generator, sample_draws, sample_generator

__all__ = ["Augmented", "EpochCounter", "current_generator", "sample_draws", "sample_generator"]

T_co = TypeVar("T_co", covariant=True)


class EpochCounter:
    """The epoch a dataset draws for, shared by every copy of it in this process (ThreadLoader
    gives each worker thread one: shallow, deep or pickled), so ``set_epoch`` on the dataset
    reaches every worker thread, persistent ones included; a copy in another process (a worker
    process) has its own, starting at the epoch it was pickled with. Reads and writes are under
    a lock."""

    __slots__ = ("__weakref__", "_epoch", "_key", "_lock")

    def __init__(self, epoch: int = 0) -> None:
        self._lock = threading.Lock()
        self._epoch = 0
        self.set(epoch)
        with _LIVE_LOCK:
            self._key = next(_KEYS)
            _LIVE[self._key] = self

    def set(self, epoch: int) -> None:
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ValueError(f"epoch must be an int >= 0, got {epoch!r}")
        with self._lock:
            self._epoch = epoch

    def get(self) -> int:
        with self._lock:
            return self._epoch

    def __deepcopy__(self, memo: dict[int, Any]) -> EpochCounter:
        return self

    def __reduce__(self) -> tuple[Callable[[int, int, int], EpochCounter], tuple[int, int, int]]:
        return _shared_counter, (os.getpid(), self._key, self.get())


_LIVE_LOCK = threading.Lock()
_LIVE: weakref.WeakValueDictionary[int, EpochCounter] = weakref.WeakValueDictionary()  # by _key, under the lock
_KEYS = itertools.count()


def _shared_counter(pid: int, key: int, epoch: int) -> EpochCounter:
    """The counter a pickle names: the live one where it was pickled in this process, else a
    new one at ``epoch`` (a forked child's pid differs, so it gets its own too)."""
    if pid == os.getpid():
        with _LIVE_LOCK:
            live = _LIVE.get(key)
        if live is not None:
            return live
    return EpochCounter(epoch)


class Augmented(Dataset[Any], Generic[T_co]):
    """``transform(dataset[index])``, its random draws taken from
    ``sample_generator(seed, epoch, index)``: the same ``seed`` and epoch give the same items
    whatever thread, worker count, ``item_concurrency`` or timing loads them, and after a
    resume (the draws depend on nothing else).

    Call :meth:`set_epoch` before each epoch's ``iter(loader)`` (as with
    ``DistributedSampler``); it reaches the worker threads' copies of the dataset. ``len`` and
    indexing are the wrapped dataset's. Without ``seed``, the draws are the loader's: in a
    ``ThreadLoader(per_sample_rng=True)`` from ``(the loader generator's base seed, the
    loader's epoch, index)``, with the same guarantees; elsewhere from torch's global generator.
    """

    def __init__(self, dataset: Dataset[T_co], transform: Callable[[Any], Any], *, seed: int | None = None) -> None:
        if not callable(transform):
            raise TypeError(f"transform must be callable, got {type(transform).__name__}")
        if seed is not None:
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
        if self.seed is None:  # the loader's draws (per_sample_rng=True), else torch's global generator
            return self.transform(item)
        with sample_draws(sample_generator(self.seed, self.epoch.get(), index)):
            return self.transform(item)
