"""Hugging Face ``Trainer``: train and evaluate from ThreadLoaders, resumed exactly.

``Trainer.get_train_dataloader`` builds a ``torch.utils.data.DataLoader`` and hands it to
``accelerator.prepare``; on resume, ``Trainer`` skips the batches already trained with
accelerate's ``skip_first_batches``, which rebuilds a plain ``DataLoader``. The documented
way to change the loaders is to override ``get_train_dataloader``/``get_eval_dataloader`` in a
subclass: :class:`ThreadLoaderTrainerMixin` does so, building ThreadLoaders from the
Trainer's arguments (batch size, its sampler, collator, ``dataloader_*`` settings) and
preparing them with :func:`~torch_threadloader.integrations.accelerate.prepare_threadloader`.

Resume: at each save the train loader's ``state_dict()`` is written beside the checkpoint
(``threadloader_state.pt``, by rank zero; the call is a collective in a process group, made
on every rank), and ``train(resume_from_checkpoint=...)`` loads it, so the resumed epoch
continues at exactly the batch after the checkpoint's step, without loading the batches
before it. ``Trainer``'s own skipping is turned off (``args.ignore_data_skip = True``): it would
skip a second time, on a plain DataLoader.

Importing this module needs ``transformers`` and ``accelerate``.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import transformers
from transformers import Trainer, TrainerCallback
from transformers.trainer_pt_utils import BatchRebalanceSampler
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint

from torch_threadloader.integrations.accelerate import prepare_threadloader
from torch_threadloader.loader import ThreadLoader

__all__ = [
    "LOADER_STATE_NAME",
    "TESTED_TRANSFORMERS",
    "TRAINER_PRIVATE_HELPERS",
    "ThreadLoaderTrainer",
    "ThreadLoaderTrainerMixin",
]

#: The file, in a checkpoint's folder, that holds the train loader's state.
LOADER_STATE_NAME = "threadloader_state.pt"

#: The transformers release the mixin is tested with (and accelerate 1.15.0).
TESTED_TRANSFORMERS = "5.24.0"

#: Trainer's private members the mixin calls, checked when it is made. transformers 5.24 has no
#: public way to change the loader class: the one place that builds a loader,
#: ``Trainer._get_dataloader``, makes a ``torch.utils.data.DataLoader`` and hands it to
#: ``accelerator.prepare``, and the public ``get_train_dataloader``/``get_eval_dataloader`` return
#: that prepared loader. Overriding those two (the documented override points) and calling these
#: keeps Trainer's own sampler (``train_sampling_strategy``, ``data_seed``, the eval rules), its
#: column removal and its batch size (``auto_find_batch_size`` changes ``_train_batch_size``)
#: rather than a copy of them.
TRAINER_PRIVATE_HELPERS = (
    "_get_train_sampler",
    "_get_eval_sampler",
    "_remove_unused_columns",
    "_get_collator_with_removed_columns",
    "_train_batch_size",
)


class ThreadLoaderTrainerMixin:
    """Mix in before ``Trainer`` (``class MyTrainer(ThreadLoaderTrainerMixin, Trainer)``): the
    train and eval loaders are ThreadLoaders, and a resume continues the train loader's epoch
    from its own state.

    ``threadloader_kwargs`` (a keyword of ``__init__``) are extra ThreadLoader arguments
    (``item_concurrency``, ``stats``, ``on_error``, ...) for every loader built. The loaders
    take the Trainer's batch size, ``_get_train_sampler``/``_get_eval_sampler`` and collator
    (with unused columns removed as ``Trainer`` removes them), ``dataloader_num_workers`` (as
    threads), ``dataloader_pin_memory``, ``dataloader_persistent_workers``,
    ``dataloader_prefetch_factor``, ``dataloader_in_order`` and ``dataloader_drop_last``. Not
    taken: Trainer's ``seed_worker`` ``worker_init_fn`` (it reseeds the process's global
    generators; from a worker thread it would reseed the training thread's) and
    ``dataloader_multiprocessing_context`` (threads). ``train_threadloader`` is the latest
    train loader. A ``datasets.Dataset`` or an IterableDataset works as with ``Trainer``.
    """

    def __init__(self, *args: Any, threadloader_kwargs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        missing = [name for name in TRAINER_PRIVATE_HELPERS if not hasattr(self, name)]
        if missing:
            raise TypeError(
                f"ThreadLoaderTrainerMixin builds its loaders with Trainer's {', '.join(missing)}, which "
                f"transformers {transformers.__version__} does not have (tested with {TESTED_TRANSFORMERS})"
            )
        self.threadloader_kwargs = dict(threadloader_kwargs or {})
        self.train_threadloader: ThreadLoader[Any] | None = None
        self._threadloader_resume: dict[str, Any] | None = None
        trainer: Any = self
        trainer.args.ignore_data_skip = True  # the loader resumes from its state (module docstring)
        trainer.add_callback(_SaveLoaderState(self))

    def _threadloader(self, dataset: Any, batch_size: int, sampler: Any, description: str) -> ThreadLoader[Any]:
        trainer: Any = self
        args = trainer.args
        collator = trainer.data_collator
        try:
            import datasets

            is_hf_dataset = isinstance(dataset, datasets.Dataset)
        except ImportError:
            is_hf_dataset = False
        if is_hf_dataset:
            dataset = trainer._remove_unused_columns(dataset, description=description)
        else:
            collator = trainer._get_collator_with_removed_columns(collator, description=description)
        params: dict[str, Any] = {
            "batch_size": batch_size,
            "collate_fn": collator,
            "num_workers": args.dataloader_num_workers,
            "pin_memory": args.dataloader_pin_memory,
            "persistent_workers": args.dataloader_persistent_workers and args.dataloader_num_workers > 0,
            "prefetch_factor": args.dataloader_prefetch_factor,
            "in_order": args.dataloader_in_order,
        }
        if isinstance(sampler, BatchRebalanceSampler):  # a batch sampler, rank-aware already (as Trainer)
            del params["batch_size"]
            params["batch_sampler"] = sampler
        elif not isinstance(dataset, torch.utils.data.IterableDataset):
            params["sampler"] = sampler
            params["drop_last"] = args.dataloader_drop_last
        params.update(self.threadloader_kwargs)
        loader = ThreadLoader(dataset, **params)
        prepared = prepare_threadloader(trainer.accelerator, loader, register=False)
        shard = prepared.batch_sampler
        if isinstance(sampler, BatchRebalanceSampler) and getattr(shard, "batch_sampler", None) is sampler:
            # accelerate's BatchSamplerShard would shard it a second time: a pass-through, as Trainer makes it
            shard.num_processes, shard.process_index = 1, 0  # type: ignore[union-attr]
        return prepared

    def get_train_dataloader(self) -> ThreadLoader[Any]:
        """The train loader, a ThreadLoader prepared for this process; resumed from the
        checkpoint ``train(resume_from_checkpoint=...)`` named."""
        trainer: Any = self
        if trainer.train_dataset is None:
            raise ValueError("Trainer: training requires a train_dataset.")
        dataset = trainer.train_dataset
        sampler = None
        if not isinstance(dataset, torch.utils.data.IterableDataset):
            sampler = trainer._get_train_sampler(dataset)
        loader = self._threadloader(dataset, trainer._train_batch_size, sampler, "Training")
        if self._threadloader_resume is not None:
            loader.load_state_dict(self._threadloader_resume)
            self._threadloader_resume = None
        self.train_threadloader = loader
        return loader

    def get_eval_dataloader(self, eval_dataset: Any = None) -> ThreadLoader[Any]:
        """An eval loader, a ThreadLoader prepared for this process (``eval_dataset``: a name
        of ``self.eval_dataset``, a dataset, or ``None`` for ``self.eval_dataset``)."""
        trainer: Any = self
        if eval_dataset is None and trainer.eval_dataset is None:
            raise ValueError("Trainer: evaluation requires an eval_dataset.")
        if isinstance(eval_dataset, str):
            dataset = trainer.eval_dataset[eval_dataset]
        else:
            dataset = eval_dataset if eval_dataset is not None else trainer.eval_dataset
        sampler = None
        if not isinstance(dataset, torch.utils.data.IterableDataset):
            sampler = trainer._get_eval_sampler(dataset)
        return self._threadloader(dataset, trainer.args.eval_batch_size, sampler, "Evaluation")

    def train(self, resume_from_checkpoint: str | bool | None = None, *args: Any, **kwargs: Any) -> Any:
        """``Trainer.train``; a checkpoint to resume from (a path, or ``True`` for the latest in
        ``output_dir``) also gives the train loader its state, when the checkpoint has one."""
        trainer: Any = self
        path = resume_from_checkpoint
        if path is True:
            path = get_last_checkpoint(trainer.args.output_dir)  # type: ignore[no-untyped-call]
        if isinstance(path, str):
            state_file = os.path.join(path, LOADER_STATE_NAME)
            if os.path.isfile(state_file):
                self._threadloader_resume = torch.load(state_file, weights_only=True)
        return super().train(resume_from_checkpoint, *args, **kwargs)  # type: ignore[misc]


class ThreadLoaderTrainer(ThreadLoaderTrainerMixin, Trainer):
    """``Trainer`` with :class:`ThreadLoaderTrainerMixin`."""


class _SaveLoaderState(TrainerCallback):
    """Writes the train loader's state into each checkpoint's folder (every rank takes the
    state, a collective; rank zero writes it)."""

    def __init__(self, trainer: ThreadLoaderTrainerMixin) -> None:
        import weakref

        self._trainer = weakref.ref(trainer)

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        trainer = self._trainer()
        loader = trainer.train_threadloader if trainer is not None else None
        if loader is None:
            return
        loader_state = loader.state_dict()
        if state.is_world_process_zero:
            folder = os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")
            os.makedirs(folder, exist_ok=True)
            torch.save(loader_state, os.path.join(folder, LOADER_STATE_NAME))
