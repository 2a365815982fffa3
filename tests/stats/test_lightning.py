"""LoaderStatsCallback: a real Trainer on CPU logs the stats of its train ThreadLoaders to a
CSVLogger, under names beside Lightning's profiler actions."""

from __future__ import annotations

import csv
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from torch_threadloader import ThreadLoader

pl = pytest.importorskip("lightning.pytorch")
from lightning.pytorch.loggers import CSVLogger  # noqa: E402

from torch_threadloader.lightning import (  # noqa: E402
    PROFILER_NAMES,
    VERDICT_KINDS,
    LoaderStatsCallback,
    loader_metrics,
    train_threadloaders,
)

ITEMS, BATCH, EPOCHS = 64, 8, 2
BATCHES = ITEMS // BATCH  # per epoch


class Linear(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if isinstance(batch, dict):  # several train dataloaders
            batch = batch["threads"]
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _data() -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(ITEMS, 4, generator=g), torch.randn(ITEMS, 1, generator=g))


class Loaders(pl.LightningDataModule):
    """Train dataloader(s) of the given ``shape``; every loader it made is closed at teardown."""

    def __init__(self, shape: str = "one", stats: bool = True) -> None:
        super().__init__()
        self.shape = shape
        self.stats = stats
        self.made: list[ThreadLoader[Any]] = []

    def _threads(self) -> ThreadLoader[Any]:
        loader = ThreadLoader(_data(), batch_size=BATCH, num_workers=2, item_concurrency=2, stats=self.stats)
        self.made.append(loader)
        return loader

    def train_dataloader(self) -> Any:
        if self.shape == "one":
            return self._threads()
        if self.shape == "dict":
            return {"threads": self._threads(), "torch": DataLoader(_data(), batch_size=BATCH)}
        return DataLoader(_data(), batch_size=BATCH)

    def teardown(self, stage: str) -> None:
        for loader in self.made:
            loader.close()


def _fit(tmp_path: Path, dm: Loaders, callback: LoaderStatsCallback) -> tuple[pl.Trainer, list[dict[str, str]]]:
    trainer = pl.Trainer(
        max_epochs=EPOCHS,
        accelerator="cpu",
        devices=1,
        logger=CSVLogger(tmp_path),
        callbacks=[callback],
        log_every_n_steps=1,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Linear(), datamodule=dm)
    assert trainer.logger is not None and trainer.logger.log_dir is not None
    path = Path(trainer.logger.log_dir) / "metrics.csv"
    if not path.exists():  # nothing was logged
        return trainer, []
    with open(path, newline="") as f:
        return trainer, list(csv.DictReader(f))


def _logged(rows: list[dict[str, str]], name: str) -> list[tuple[int, float]]:
    return [(int(r["step"]), float(r[name])) for r in rows if r.get(name)]


def test_the_epoch_end_logs_every_stage_with_sane_values(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    dm = Loaders()
    with caplog.at_level(logging.INFO):
        trainer, rows = _fit(tmp_path, dm, LoaderStatsCallback())
    p = "threadloader"
    # summed over the loader's epochs: a value per epoch end
    assert [v for _, v in _logged(rows, f"{p}/train_dataloader_next/count")] == [BATCHES, 2 * BATCHES]
    assert [v for _, v in _logged(rows, f"{p}/batches")] == [BATCHES, 2 * BATCHES]
    assert [v for _, v in _logged(rows, f"{p}/fetch/count")] == [ITEMS, 2 * ITEMS]  # one per item
    assert [v for _, v in _logged(rows, f"{p}/collate/count")] == [BATCHES, 2 * BATCHES]
    assert [v for _, v in _logged(rows, f"{p}/run_training_batch/count")] == [BATCHES - 1, 2 * (BATCHES - 1)]
    assert trainer.global_step == EPOCHS * BATCHES
    last = [r for r in rows if r.get(f"{p}/batches")][-1]
    for stage in ("train_dataloader_next", "run_training_batch", "fetch", "collate", "sampling"):
        p50, p90, p99 = (float(last[f"{p}/{stage}/{q}_ms"]) for q in ("p50", "p90", "p99"))
        assert 0 < p50 <= p90 <= p99 < 60_000, stage
        total, mean, count = (float(last[f"{p}/{stage}/{k}"]) for k in ("total_s", "mean_ms", "count"))
        assert total > 0 and mean == pytest.approx(total / count * 1e3)
    assert float(last[f"{p}/fetch/errors"]) == 0 and float(last[f"{p}/fetch/retries"]) == 0
    assert 0 <= float(last[f"{p}/ready_share"]) <= 1 and float(last[f"{p}/cores_used"]) > 0
    code = float(last[f"{p}/verdict"])
    assert code == int(code) and VERDICT_KINDS[int(code)] != "no-data"
    assert f"{p}/transform/count" not in last or not last[f"{p}/transform/count"]  # nothing marked a transform
    # the values also reach callback_metrics, and each epoch's verdict is said in words
    assert float(trainer.callback_metrics[f"{p}/batches"]) == 2 * BATCHES
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith(f"{p}: ")]
    assert len(said) == EPOCHS
    assert said[-1].split(": ", 1)[1].lower().startswith(VERDICT_KINDS[int(code)])


def test_every_n_steps_also_logs_at_those_steps(tmp_path: Path) -> None:
    _, rows = _fit(tmp_path, Loaders(), LoaderStatsCallback(every_n_steps=3, verbose=False))
    name = "threadloader/train_dataloader_next/count"
    by_epoch = [(int(r["step"]), float(r[name])) for r in rows if r.get(name) and r.get("epoch")]
    by_step = [(int(r["step"]), float(r[name])) for r in rows if r.get(name) and not r.get("epoch")]
    assert by_epoch == [(BATCHES - 1, BATCHES), (2 * BATCHES - 1, 2 * BATCHES)]  # Lightning's epoch-end rows
    # every third train batch, at its global step: the batches handed so far (Lightning fetches one ahead)
    assert [s for s, _ in by_step] == [3, 6, 9, 12, 15]
    assert all(s <= v <= s + 1 for s, v in by_step), by_step


def test_several_train_dataloaders_are_named_by_key(tmp_path: Path) -> None:
    _, rows = _fit(tmp_path, Loaders("dict"), LoaderStatsCallback(verbose=False))
    names = {k for r in rows for k, v in r.items() if v and k.startswith("threadloader")}
    assert "threadloader/threads/train_dataloader_next/count" in names
    assert all(n.startswith("threadloader/threads/") for n in names)  # the torch DataLoader has no stats
    counts = [v for _, v in _logged(rows, "threadloader/threads/batches")]
    assert counts == [BATCHES, 2 * BATCHES]


def test_loaders_without_stats_are_named_in_one_warning(tmp_path: Path) -> None:
    with pytest.warns(UserWarning, match="was built without stats=True") as caught:
        _, rows = _fit(tmp_path, Loaders(stats=False), LoaderStatsCallback(every_n_steps=2))
    assert sum("without stats=True" in str(w.message) for w in caught) == 1
    assert not any(k.startswith("threadloader") and v for r in rows for k, v in r.items())
    with pytest.warns(UserWarning, match="holds no ThreadLoader"):
        _fit(tmp_path / "torch", Loaders("torch"), LoaderStatsCallback())


def test_in_a_process_group_each_rank_writes_its_own_to_the_loggers(tmp_path: Path) -> None:
    import warnings

    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", pl.utilities.warnings.PossibleUserWarning)  # no "use sync_dist=True"
            warnings.filterwarnings("ignore", message=".*(log_every_n_steps|num_workers|LeafSpec).*")
            trainer, rows = _fit(tmp_path, Loaders(), LoaderStatsCallback(verbose=False))
    finally:
        dist.destroy_process_group()
    name = "threadloader/train_dataloader_next/count"
    assert [(int(r["step"]), float(r[name])) for r in rows if r.get(name)] == [
        (BATCHES, BATCHES),
        (2 * BATCHES, 2 * BATCHES),
    ]
    assert not any(k.startswith("threadloader") for k in trainer.callback_metrics)  # not reduced across ranks


def test_flattening_and_metric_names_without_a_trainer() -> None:
    a = ThreadLoader(_data(), batch_size=BATCH, stats=True)
    b = ThreadLoader(_data(), batch_size=BATCH)
    try:
        found = list(train_threadloaders({"x": [a, DataLoader(_data())], "y": (b,)}))
        assert found == [("x/0", a), ("y/0", b)]
        assert list(train_threadloaders(a)) == [("", a)]
        for _ in a:
            pass
        metrics = loader_metrics(a.stats(), "tl")
    finally:
        a.close()
        b.close()
    assert metrics["tl/train_dataloader_next/count"] == BATCHES and metrics["tl/batches"] == BATCHES
    assert {name.split("/")[1] for name in metrics} <= {
        *PROFILER_NAMES.values(),
        "batches",
        "ready_share",
        "cores_used",
        "verdict",
    }
    with pytest.raises(ValueError, match="every_n_steps must be a positive int"):
        LoaderStatsCallback(every_n_steps=0)


def test_importing_the_package_does_not_import_lightning() -> None:
    code = "import sys, torch_threadloader; assert not any(m.split('.')[0] in ('lightning', 'pytorch_lightning') for m in sys.modules), 'lightning imported'"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr


def test_module_all_is_sorted_and_documented() -> None:
    import inspect

    import torch_threadloader.lightning as module

    assert module.__all__ == sorted(module.__all__)
    for name in module.__all__:
        assert inspect.getdoc(getattr(module, name)), name
