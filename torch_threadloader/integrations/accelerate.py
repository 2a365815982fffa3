"""accelerate: prepare a ThreadLoader the way ``Accelerator.prepare`` prepares a DataLoader, and keep it one.

``Accelerator.prepare(loader)`` rebuilds any DataLoader as accelerate's ``DataLoaderShard``
around a plain ``torch.utils.data.DataLoader``: a ThreadLoader's threads, async items, resume,
stats, skipping and byte budget would all be gone. :func:`prepare_threadloader` asks
accelerate's own ``prepare_data_loader`` for the shard this process gets (its
``BatchSamplerShard`` or ``IterableDatasetShard``, ``split_batches``, ``even_batches``,
``use_seedable_sampler``, the generator it synchronises), then builds an
:class:`AcceleratedThreadLoader` with that shard and the ThreadLoader's own settings. That
loader iterates as ``DataLoaderShard`` does (random states synchronised at each ``iter()``,
``set_epoch``, batches moved to ``accelerator.device``, one batch fetched ahead so
``end_of_dataloader`` and ``remainder`` are right for ``accumulate()`` and
``gather_for_metrics``), and it is registered for checkpointing: ``save_state`` /
``load_state`` save and restore its own ``state_dict()``, which leaves out the batch fetched
ahead, so a resume continues at exactly the batch after the last one the loop received.

Importing this module needs ``accelerate``; ``import torch_threadloader`` never does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, ClassVar, TypeVar

import torch
from accelerate import Accelerator
from accelerate.data_loader import DataLoaderStateMixin, SeedableRandomSampler, get_sampler, prepare_data_loader
from accelerate.state import GradientState
from accelerate.utils import send_to_device, synchronize_rng_states
from torch.utils.data import BatchSampler, IterableDataset

from torch_threadloader.integrations._rebuild import check_plain_threadloader, loader_settings
from torch_threadloader.loader import ThreadLoader

__all__ = ["AcceleratedThreadLoader", "prepare_threadloader", "skip_first_batches"]

T_co = TypeVar("T_co", covariant=True)


class AcceleratedThreadLoader(ThreadLoader[T_co], DataLoaderStateMixin):  # type: ignore[misc]
    """A ThreadLoader that iterates as accelerate's ``DataLoaderShard``; made by
    :func:`prepare_threadloader`.

    Takes ThreadLoader's arguments plus ``device`` (where batches go, ``None`` for where they
    are), ``non_blocking``, ``rng_types`` and ``synchronized_generator`` (synchronised across
    processes at each ``iter()``, as accelerate does). Each epoch fetches one batch ahead of
    the one it hands out (accelerate's rule: the last batch is known as it is handed out);
    ``state_dict()`` leaves that batch out, so it is loaded again on resume. ``iteration`` is
    the epoch count ``set_epoch`` gets at each ``iter()``; it is saved with the state.
    """

    #: accelerate's mark of a loader it prepared: ``Accelerator.prepare`` passes it through.
    _is_accelerate_prepared: ClassVar[bool] = True

    def __init__(
        self,
        *args: Any,
        device: torch.device | None = None,
        non_blocking: bool = False,
        rng_types: list[Any] | None = None,
        synchronized_generator: torch.Generator | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.device = device
        self.non_blocking = bool(non_blocking)
        self.rng_types = rng_types
        self.synchronized_generator = synchronized_generator
        self.gradient_state = GradientState()
        self._drop_last = self.drop_last
        self.iteration = 0
        self._ahead: _Ahead | None = None  # the latest epoch's batches fetched ahead

    def __iter__(self) -> _AcceleratedEpoch:  # type: ignore[override]
        return iter(_AcceleratedEpoch(self))

    # -- what DataLoaderShard offers, for accelerate and the code written for it ---------------
    @property
    def total_batch_size(self) -> int:
        """The batch size over all processes (accelerate's ``DataLoaderShard.total_batch_size``)."""
        batch_sampler = self.sampler if isinstance(self.sampler, BatchSampler) else self.batch_sampler
        size = int(getattr(batch_sampler, "batch_size", None) or self.batch_size or 1)
        if getattr(batch_sampler, "split_batches", False):
            return size
        return size * int(getattr(batch_sampler, "num_processes", 1))

    @property
    def total_dataset_length(self) -> int:
        """The dataset's length over all processes."""
        return int(getattr(self.dataset, "total_length", None) or len(self.dataset))  # type: ignore[arg-type]

    def get_sampler(self) -> Any:
        """The sampler (accelerate's ``get_sampler``), as accelerate's ``save_state`` reads it."""
        return get_sampler(self)

    def set_epoch(self, epoch: int) -> None:
        """Tell the samplers (and a dataset with ``set_epoch``) which epoch is next, as
        ``DataLoaderShard.set_epoch`` does; called at each ``iter()`` with ``iteration``."""
        self.iteration = int(epoch)
        found = False
        for owner in (self.batch_sampler, getattr(self.batch_sampler, "batch_sampler", None)):
            for sampler in (owner, getattr(owner, "sampler", None)):
                if sampler is not None and hasattr(sampler, "set_epoch"):
                    sampler.set_epoch(epoch)
                    found = True
        if not found and hasattr(self.dataset, "set_epoch"):
            self.dataset.set_epoch(epoch)

    def state_dict(self, *, gather: bool | None = None) -> dict[str, Any]:
        """The ThreadLoader's state (a collective in a process group, see
        ``ThreadLoader.state_dict``) and ``iteration``."""
        return {"threadloader": super().state_dict(gather=gather), "iteration": self.iteration}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict`: the next ``iter()`` continues its epoch."""
        if not isinstance(state_dict, dict) or "threadloader" not in state_dict:
            raise ValueError("state_dict is not an AcceleratedThreadLoader's state (no 'threadloader' key)")
        super().load_state_dict(state_dict["threadloader"])
        self.iteration = int(state_dict.get("iteration", 0))

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state.pop("gradient_state", None)
        state.pop("_ahead", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self.gradient_state = GradientState()
        self._ahead = None


class _Raised:
    """An exception a batch fetched ahead raised, handed out in its turn."""

    __slots__ = ("exc",)

    def __init__(self, exc: Exception) -> None:
        self.exc = exc


class _Ahead:
    """The batches an epoch fetched and has not handed out (``batches``: one, or none at the
    end; a closed epoch's stay counted, as placeholders). The ThreadLoader's epoch is started
    from this object's ``__iter__``, where it finds it (``holds_batches_ahead``) and leaves those
    batches out of its ``state_dict()``. The loader keeps the latest one, so a state taken
    after the epoch was closed or dropped still leaves them out."""

    holds_batches_ahead: ClassVar[bool] = True
    length: ClassVar[None] = None  # no length: every held batch is left out of the state

    def __init__(self, loader: AcceleratedThreadLoader[Any]) -> None:
        self._loader: AcceleratedThreadLoader[Any] | None = loader
        self.batches: list[Any] = []

    def __iter__(self) -> Iterator[Any]:
        loader, self._loader = self._loader, None  # no reference to the loader kept
        assert loader is not None, "started once"
        return ThreadLoader.__iter__(loader)

    def release(self) -> None:
        """Drop the held batches' data, keeping their count."""
        self.batches[:] = [_RELEASED] * len(self.batches)


_RELEASED = object()


class _AcceleratedEpoch(Iterator[Any]):
    """One epoch of an :class:`AcceleratedThreadLoader`: the ThreadLoader's epoch, one batch
    ahead (accelerate's ``DataLoaderShard`` rule), the batch fetched ahead held in an
    :class:`_Ahead` that the loader's state leaves out."""

    def __init__(self, loader: AcceleratedThreadLoader[Any]) -> None:
        self._loader = loader
        self._ahead = _Ahead(loader)
        self._inner: Iterator[Any] | None = None
        self._started = False
        self._ended = False

    def __iter__(self) -> _AcceleratedEpoch:
        if not self._started:
            self._started = True
            loader = self._loader
            if loader.rng_types:
                synchronize_rng_states(loader.rng_types, loader.synchronized_generator)
            loader.begin()
            loader.set_epoch(loader.iteration)
            loader._ahead = self._ahead
            self._inner = iter(self._ahead)
            self._fetch_ahead()
        return self

    def __len__(self) -> int:
        return len(self._loader)

    def _fetch_ahead(self) -> None:
        inner = self._inner
        if inner is None:
            return
        try:
            batch = next(inner)
        except StopIteration:
            self._inner = None
            self._loader.end_of_dataloader = True
            return
        except Exception as exc:  # the batch's own error: handed out in its turn
            self._ahead.batches.append(_Raised(exc))
            return
        loader = self._loader
        if loader.device is not None:
            batch = send_to_device(batch, loader.device, non_blocking=loader.non_blocking)
        self._ahead.batches.append(batch)

    def __next__(self) -> Any:
        held = self._ahead.batches
        if self._ended:
            raise StopIteration
        if not held:
            self._fetch_ahead()  # after an error
        if not held:
            self._end()
            raise StopIteration
        item = held.pop(0)
        if isinstance(item, _Raised):
            raise item.exc
        self._fetch_ahead()
        return item

    def _end(self) -> None:
        if not self._ended:
            self._ended = True
            self._loader.iteration += 1
            self._loader.end()

    def close(self) -> None:
        """Stop the ThreadLoader's epoch (its threads) and leave accelerate's gradient state;
        a batch fetched ahead stays left out of the loader's state."""
        inner, self._inner = self._inner, None
        self._ahead.release()
        close = getattr(inner, "close", None)
        if close is not None:
            close()
        if self._started and not self._ended:
            self._ended = True
            self._loader.end()

    def __del__(self) -> None:
        self._ahead.release()
        if self._started and not self._ended:
            self._ended = True
            # accelerate's process state may be gone by now (reset, or interpreter exit); a
            # collected epoch has nothing left to tell it then.
            with contextlib.suppress(Exception):
                self._loader.end()


def prepare_threadloader(
    accelerator: Accelerator,
    loader: ThreadLoader[Any],
    *,
    device_placement: bool | None = None,
    register: bool = True,
) -> AcceleratedThreadLoader[Any]:
    """``accelerator.prepare(loader)`` for a ThreadLoader, keeping it a ThreadLoader.

    This process's shard is the one accelerate gives (its ``prepare_data_loader``, with the
    accelerator's ``split_batches``, ``even_batches``, ``use_seedable_sampler`` and
    ``data_seed``; like it, a random sampler without a generator gets a seeded one, kept in
    step across processes). Batches go to ``accelerator.device`` when ``device_placement``
    (default: the accelerator's). With ``register`` (the default) the returned loader is
    registered with ``accelerator.register_for_checkpointing``, so ``save_state``/``load_state`` carry its
    state (registered objects are matched by order: prepare the loaders in the same order in
    the resumed run), and a later ``accelerator.prepare(...)`` passes it through unchanged.
    ``dispatch_batches=True`` is refused: there only the main process would iterate the
    loader. ``loader`` itself is left to be dropped; it must be a plain ``ThreadLoader``.
    """
    check_plain_threadloader(loader)
    if not isinstance(accelerator, Accelerator):
        raise TypeError(f"accelerator must be an accelerate.Accelerator, got {type(accelerator).__name__}")
    config = accelerator.dataloader_config
    if config.dispatch_batches:
        raise ValueError(
            "prepare_threadloader does not apply with dispatch_batches=True: the main process would iterate the "
            "loader and send the others slices; leave DataLoaderConfiguration(dispatch_batches=None or False) so "
            "each process iterates its own shard on its own threads"
        )
    if device_placement is None:
        device_placement = bool(accelerator.device_placement)
    shard = prepare_data_loader(
        loader,
        accelerator.device,
        num_processes=accelerator.num_processes,
        process_index=accelerator.process_index,
        split_batches=config.split_batches,
        put_on_device=device_placement,
        rng_types=list(accelerator.rng_types),
        dispatch_batches=False,
        even_batches=config.even_batches,
        use_seedable_sampler=config.use_seedable_sampler,
        data_seed=config.data_seed,
        non_blocking=config.non_blocking,
        torch_device_mesh=accelerator.torch_device_mesh,
    )
    seedable = get_sampler(shard)
    if isinstance(seedable, SeedableRandomSampler) and seedable.generator is None:
        # What its first __iter__ makes: made now, so a state taken later and the fresh
        # loader that resumes from it agree that the sampler has a generator.
        seedable.generator = torch.Generator()
        seedable.generator.manual_seed(seedable.initial_seed)
    batching: dict[str, Any]
    if isinstance(shard.dataset, IterableDataset):
        batching = {"batch_size": shard.batch_size, "drop_last": shard.drop_last}
    elif isinstance(shard.sampler, BatchSampler):  # a batch sampler passed as the sampler
        batching = {"sampler": shard.sampler, "batch_size": None}
    elif shard.batch_sampler is not None:
        batching = {"batch_sampler": shard.batch_sampler}
    else:
        batching = {"sampler": shard.sampler, "batch_size": None}
    own_cut = (
        "defer_stragglers=True" if loader.defer_stragglers else "max_batch_cost" if loader.max_batch_cost else None
    )
    if own_cut is not None and batching.get("batch_sampler") is not None:
        # Straggler mode and cost batching cut their own batches from a sampler's samples.
        if accelerator.num_processes > 1:
            raise ValueError(
                f"prepare_threadloader with {own_cut} runs in one process only: accelerate shards "
                "batches, and the loader cuts its own; in more processes build the loader with a "
                "DistributedSampler (sampler=) and iterate it without prepare_threadloader"
            )
        inner = getattr(batching["batch_sampler"], "batch_sampler", batching["batch_sampler"])
        batching = {"sampler": inner.sampler, "batch_size": loader.batch_size, "drop_last": loader.drop_last}
    prepared: AcceleratedThreadLoader[Any] = AcceleratedThreadLoader(
        shard.dataset,
        **batching,
        **loader_settings(loader),
        device=shard.device,
        non_blocking=config.non_blocking,
        rng_types=shard.rng_types,
        synchronized_generator=shard.synchronized_generator,
    )
    prepared._drop_last = loader.drop_last
    if register:
        accelerator.register_for_checkpointing(prepared)
    return prepared


def skip_first_batches(loader: ThreadLoader[Any], num_batches: int = 0) -> ThreadLoader[Any]:
    """accelerate's ``skip_first_batches`` for a ThreadLoader: ``loader`` itself, whose next
    ``iter()`` resumes from its own state (the one ``load_state`` loaded, or where its last
    epoch stopped), exactly after the batches that state delivered and without loading them.

    ``num_batches`` is checked against that state where the state counts its batches (a
    map-style dataset: batches delivered; an IterableDataset: every worker's), and a
    ``ValueError`` names both when they differ. (accelerate's own ``skip_first_batches``
    would rebuild a plain ``DataLoader``.)
    """
    if not isinstance(loader, ThreadLoader):
        raise TypeError(f"loader must be a ThreadLoader, got {type(loader).__name__}")
    if isinstance(num_batches, bool) or not isinstance(num_batches, int) or num_batches < 0:
        raise ValueError(f"num_batches must be a non-negative int, got {num_batches!r}")
    state = loader.state_dict(gather=False)
    inner = state.get("threadloader", state)
    delivered = _delivered(inner)
    if delivered is not None and delivered != num_batches:
        raise ValueError(
            f"skip_first_batches(num_batches={num_batches}) but the loader's state has {delivered} batches of "
            "its epoch delivered: load the checkpoint whose step this is (accelerator.load_state), and the loader "
            "resumes from its own state"
        )
    loader.load_state_dict(state)
    return loader


def _delivered(state: dict[str, Any]) -> int | None:
    """Batches of the epoch a (local) ThreadLoader state delivered, where it counts them."""
    if state.get("finished", True) and "frontier" not in state and "workers" not in state:
        return 0
    if "frontier" in state:
        done = int(state["frontier"]) + sum(int(b) - int(a) for a, b in state.get("done", ()))
        config = state.get("config", {})
        if config.get("max_batch_cost") is not None:
            return None  # batches cut by cost: their number is not the samples'
        if config.get("defer_stragglers") and config.get("batch_size"):
            # defer_stragglers: the ledger counts samples; every batch is full but an epoch's last
            return -(-done // int(config["batch_size"]))
        return done
    if "workers" in state:
        return sum(int(w.get("batches", 0)) for w in state["workers"])
    return None
