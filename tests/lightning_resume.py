"""A Lightning run whose training steps record the sample ids they trained on: the whole
run, the run stopped after ``k`` steps with a checkpoint, and the run resumed from it.

Imported by tests/resume/test_lightning.py for one process; run as
``python -m tests.lightning_resume PHASE OUT DEVICES SIZED K [PROCS]`` for DDP, where
Lightning starts the other rank by running the same command again. ``PROCS`` > 0 loads in that
many worker processes of one thread each (``worker_processes``), else 2 worker threads: two
workers in all either way, so the batches are the same.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import Dataset, IterableDataset

from torch_threadloader import ThreadLoader

N = 40
BATCH = 4
EPOCHS = 2


class Ids(Dataset[tuple[torch.Tensor, int]]):
    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return torch.full((4,), float(i)), i


class StreamOfIds(IterableDataset[tuple[torch.Tensor, int]]):
    """No ``__len__``: Lightning's fetcher then fetches one batch ahead of the step."""

    def __iter__(self) -> Iterator[tuple[torch.Tensor, int]]:
        info = torch.utils.data.get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        for i in range(start, N, step):
            yield torch.full((4,), float(i)), i


class Recorder(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.seen: list[list[int]] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, ids = batch
        self.seen.append([int(i) for i in ids])
        return self.layer(x).sum() * 1e-6

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.001)


class Data(pl.LightningDataModule):
    def __init__(self, sized: bool, procs: int = 0) -> None:
        super().__init__()
        self.sized = sized
        self.workers: dict[str, int] = {"num_workers": 1, "worker_processes": procs} if procs else {"num_workers": 2}
        self.loaders: list[ThreadLoader[Any]] = []

    def train_dataloader(self) -> ThreadLoader[Any]:
        if self.sized:
            loader = ThreadLoader(Ids(), batch_size=BATCH, shuffle=True, **self.workers)
        else:
            loader = ThreadLoader(StreamOfIds(), batch_size=BATCH, **self.workers)
        self.loaders.append(loader)
        return loader

    def teardown(self, stage: str) -> None:
        for loader in self.loaders:
            loader.close()


def run(phase: str, out: Path, devices: int, sized: bool, k: int, procs: int = 0) -> dict[str, Any]:
    """``phase``: ``full`` (the whole run), ``part`` (stop after ``k`` steps, checkpointed)
    or ``resume`` (from that checkpoint). Returns (and writes, per rank) the ids trained on
    and the warnings Lightning gave."""
    pl.seed_everything(7, workers=True, verbose=False)
    ckpt_dir = out / "ckpt"
    callbacks: list[Any] = []
    if phase == "part":
        callbacks.append(ModelCheckpoint(dirpath=ckpt_dir, every_n_train_steps=k, save_top_k=-1))
    trainer = pl.Trainer(
        max_epochs=EPOCHS,
        max_steps=k if phase == "part" else -1,
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        logger=False,
        enable_checkpointing=phase == "part",
        callbacks=callbacks,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        default_root_dir=out,
    )
    model = Recorder()
    ckpt = None
    if phase == "resume":
        ckpt = str(sorted(ckpt_dir.glob("*.ckpt"))[0])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(model, datamodule=Data(sized, procs), ckpt_path=ckpt)
    result = {
        "seen": model.seen,
        "warnings": [str(w.message) for w in caught if "resum" in str(w.message)],
        "rank": trainer.global_rank,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{phase}-rank{trainer.global_rank}.json").write_text(json.dumps(result))
    return result


if __name__ == "__main__":
    phase, out, devices, sized, k = sys.argv[1:6]
    procs = int(sys.argv[6]) if len(sys.argv) > 6 else 0
    os.environ.setdefault("PL_DISABLE_FORK", "1")
    run(phase, Path(out), int(devices), sized == "1", int(k), procs)
