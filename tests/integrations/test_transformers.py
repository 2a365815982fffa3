"""Hugging Face Trainer: trains from ThreadLoaders on this process's threads, and a resume from a
mid-epoch checkpoint trains on the same batches as the uninterrupted run."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch
import tqdm

pytest.importorskip("transformers")

from torch.utils.data import Dataset, default_collate
from transformers import GPT2Config, GPT2LMHeadModel, TrainingArguments

from torch_threadloader import ThreadLoader
from torch_threadloader.integrations.accelerate import AcceleratedThreadLoader
from torch_threadloader.integrations.transformers import LOADER_STATE_NAME, ThreadLoaderTrainer

SAMPLES, BATCH, SEQ = 32, 4, 8  # 8 steps an epoch

# transformers writes checkpoints under a tqdm bar, whose monitor thread outlives the test.
tqdm.tqdm.monitor_interval = 0


class Tokens(Dataset[dict[str, Any]]):
    """Sequence ``i``: token ids from ``i``, its index, and the process and thread that loaded it."""

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, i: int) -> dict[str, Any]:
        import threading

        if not 0 <= i < SAMPLES:
            raise IndexError(i)  # ends iteration (a length-grouped sampler iterates the dataset)
        ids = (torch.arange(SEQ) + i) % 64
        return {
            "input_ids": ids,
            "labels": ids,
            "index": i,
            "pid": os.getpid(),
            "thread": threading.current_thread().name,
        }


class Recording(ThreadLoaderTrainer):
    """Records each training batch's indices, process ids and threads before the model sees it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seen: list[list[int]] = []
        self.pids: set[int] = set()
        self.threads: set[str] = set()
        self.loader_types: set[type] = set()

    def compute_loss(self, model: Any, inputs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        if model.training:
            self.seen.append([int(i) for i in inputs.pop("index")])
            self.pids.update(int(p) for p in inputs.pop("pid"))
            self.threads.update(inputs.pop("thread"))
            self.loader_types.add(type(self.train_threadloader))
        else:
            for key in ("index", "pid", "thread"):
                inputs.pop(key)
        return super().compute_loss(model, inputs, *args, **kwargs)


def trainer(out: Path, **overrides: Any) -> Recording:
    torch.manual_seed(0)
    model = GPT2LMHeadModel(
        GPT2Config(vocab_size=64, n_positions=SEQ, n_embd=16, n_layer=1, n_head=2, bos_token_id=0, eos_token_id=0)
    )
    args = TrainingArguments(
        output_dir=str(out),
        per_device_train_batch_size=BATCH,
        per_device_eval_batch_size=BATCH,
        num_train_epochs=2,
        save_strategy="steps",
        save_steps=3,
        logging_steps=100,
        report_to="none",
        use_cpu=True,
        dataloader_num_workers=2,
        seed=0,
        disable_tqdm=True,
        remove_unused_columns=False,  # the model never sees them: compute_loss takes them out
        **overrides,
    )
    return Recording(
        model=model, args=args, train_dataset=Tokens(), eval_dataset=Tokens(), data_collator=default_collate
    )


@pytest.mark.slow
def test_trainer_trains_from_threadloaders_and_resumes_mid_epoch_exactly(tmp_path: Path) -> None:
    full = trainer(tmp_path / "full")
    full.train()
    assert full.loader_types == {AcceleratedThreadLoader}, "Trainer kept the ThreadLoader"
    assert full.pids == {os.getpid()}, "batches loaded in this process"
    assert full.threads == {"threadloader-worker-0", "threadloader-worker-1"}, "on the loader's threads"
    assert len(full.seen) == 2 * SAMPLES // BATCH
    assert sorted(i for b in full.seen[:8] for i in b) == list(range(SAMPLES)), "an epoch of every sample"
    assert full.seen[:8] != full.seen[8:], "the second epoch is shuffled anew"
    checkpoint = tmp_path / "full" / "checkpoint-3"
    assert (checkpoint / LOADER_STATE_NAME).is_file()

    resumed = trainer(tmp_path / "full")
    resumed.train(resume_from_checkpoint=str(checkpoint))
    assert resumed.loader_types == {AcceleratedThreadLoader}
    assert resumed.seen == full.seen[3:], "the resumed run trains on the uninterrupted run's batches"
    assert resumed.state.global_step == full.state.global_step


def test_eval_loader_is_a_threadloader_too(tmp_path: Path) -> None:
    t = trainer(tmp_path)
    loader = t.get_eval_dataloader()
    assert isinstance(loader, ThreadLoader) and loader.num_workers == 2
    metrics = t.evaluate()
    assert "eval_loss" in metrics


@pytest.mark.parametrize("strategy", ["random", "sequential", "group_by_length", "batch_rebalance"])
def test_the_train_loader_gives_the_batches_trainers_own_loader_gives(tmp_path: Path, strategy: str) -> None:
    """Each ``train_sampling_strategy``: the ThreadLoader yields the index batches of the
    DataLoader ``Trainer.get_train_dataloader`` builds (``batch_rebalance``'s sampler is a batch
    sampler: Trainer passes it as ``batch_sampler``)."""
    from transformers import Trainer

    t = trainer(tmp_path, train_sampling_strategy=strategy)
    torch.manual_seed(0)
    theirs = [[int(i) for i in b["index"]] for b in Trainer.get_train_dataloader(t)]
    torch.manual_seed(0)
    loader = t.get_train_dataloader()
    ours = [[int(i) for i in b["index"]] for b in loader]
    assert isinstance(loader, AcceleratedThreadLoader)
    assert ours == theirs


def test_a_transformers_without_the_private_helpers_is_refused_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A transformers release that renames a Trainer helper the mixin calls fails when the
    Trainer is made, naming it, not later with an AttributeError mid-training."""
    from transformers import Trainer

    monkeypatch.delattr(Trainer, "_get_eval_sampler")
    with pytest.raises(TypeError, match=r"_get_eval_sampler.*tested with 5\.24"):
        trainer(tmp_path)
