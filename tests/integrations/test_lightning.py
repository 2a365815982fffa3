"""Lightning DataModules work unchanged with ThreadLoader (a real Trainer on CPU)."""

from __future__ import annotations

import threading

import pytest
import torch
from torch.utils.data import DistributedSampler, TensorDataset

from torch_threadloader import ThreadLoader

pl = pytest.importorskip("lightning.pytorch")
from lightning.pytorch.utilities.data import _update_dataloader  # noqa: E402


class LinearModel(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.seen = 0

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.seen += len(x)
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class ThreadDataModule(pl.LightningDataModule):
    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.data = TensorDataset(torch.randn(64, 4, generator=g), torch.randn(64, 1, generator=g))
        self.loaders: list[ThreadLoader] = []

    def _loader(self, **kwargs) -> ThreadLoader:
        loader = ThreadLoader(self.data, batch_size=8, num_workers=2, item_concurrency=2, **kwargs)
        self.loaders.append(loader)
        return loader

    def train_dataloader(self):
        return self._loader(shuffle=True)

    def val_dataloader(self):
        return self._loader()

    def teardown(self, stage):
        for loader in self.loaders:
            loader.close()


def _trainer(tmp_path):
    """A quiet two-epoch CPU Trainer."""
    return pl.Trainer(
        max_epochs=2,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )


def test_trainer_fits_a_datamodule_that_returns_threadloaders(tmp_path):
    model, dm = LinearModel(), ThreadDataModule()
    trainer = _trainer(tmp_path)
    trainer.fit(model, datamodule=dm)
    assert model.seen == 2 * 64
    assert trainer.state.finished
    assert all(isinstance(loader, ThreadLoader) for loader in dm.loaders)
    assert "val_loss" in trainer.callback_metrics
    assert not [t for t in threading.enumerate() if t.name.startswith("threadloader")]


def test_lightning_reinstantiates_threadloader_with_a_distributed_sampler():
    data = TensorDataset(torch.arange(20).float().unsqueeze(1), torch.zeros(20, 1))
    original = ThreadLoader(data, batch_size=3, num_workers=2, item_concurrency=3, return_indices=False)
    sampler = DistributedSampler(data, num_replicas=2, rank=1, shuffle=False)
    rebuilt = _update_dataloader(original, sampler)
    try:
        assert type(rebuilt) is ThreadLoader
        assert rebuilt.sampler is sampler
        assert rebuilt.item_concurrency == 3 and rebuilt.num_workers == 2 and rebuilt.batch_size == 3
        xs = torch.cat([x for x, _ in rebuilt]).flatten().tolist()
        assert xs == [float(i) for i in range(1, 20, 2)]  # rank 1 of 2
    finally:
        original.close()
        rebuilt.close()


def _row_cost(sample) -> int:
    return 1 + int(sample[0].abs().sum() * 3)


def test_trainer_runs_a_cost_batched_epoch_to_its_end(tmp_path):
    """len() of a cost-batched loader is unknown: Lightning runs each epoch to StopIteration,
    every sample once, however many batches the budget made."""
    model = LinearModel()
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(64, 4, generator=g), torch.randn(64, 1, generator=g))
    loader = ThreadLoader(data, batch_size=16, num_workers=2, max_batch_cost=20, sample_cost=_row_cost, shuffle=True)
    trainer = _trainer(tmp_path)
    with loader:
        trainer.fit(model, train_dataloaders=loader)
    assert model.seen == 2 * 64
    assert trainer.global_step > 2 * 64 // 16  # more, smaller batches than batch_size alone makes


def test_lightning_reinstantiation_keeps_the_cost_settings():
    data = TensorDataset(torch.arange(20).float().unsqueeze(1), torch.zeros(20, 1))
    original = ThreadLoader(
        data,
        batch_size=4,
        max_batch_cost=200,
        sample_cost=_row_cost,
        cost_mode="padded",
        group_window=6,
        cost_sync=False,
    )
    sampler = DistributedSampler(data, num_replicas=2, rank=0, shuffle=False)
    with original, _update_dataloader(original, sampler) as rebuilt:
        assert (rebuilt.max_batch_cost, rebuilt.sample_cost, rebuilt.cost_mode) == (200, _row_cost, "padded")
        assert (rebuilt.group_window, rebuilt.cost_sync) == (6, False)
        xs = torch.cat([x for x, _ in rebuilt]).flatten().tolist()
        assert sorted(xs) == [float(i) for i in range(0, 20, 2)]  # rank 0 of 2, each once
