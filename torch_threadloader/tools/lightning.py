"""Lightning: :class:`LoaderStatsCallback` logs the stats of the Trainer's train ThreadLoaders.

Importing this module needs ``lightning`` (``lightning.pytorch``, else the older
``pytorch_lightning``); ``import torch_threadloader`` never does.

Names line up with Lightning's profiler actions (``SimpleProfiler``, ``AdvancedProfiler``):
the caller's wait inside ``next()`` (the loader's ``handover`` stage) is logged as
``threadloader/train_dataloader_next/...``, beside ``[_TrainingEpochLoop].train_dataloader_next``;
the time between two ``next()`` calls (``train``) as ``threadloader/run_training_batch/...``,
beside ``run_training_batch``; the loader's own stages under their names
(``threadloader/fetch/p50_ms``, ``threadloader/transform/...``, ``sampling``, ``collate``,
``pin``). Per stage: ``count``, ``total_s`` (the profiler's "Total time"), ``mean_ms``,
``p50_ms``, ``p90_ms``, ``p99_ms``, and for the loader's stages ``errors``, ``retries`` and
``cpu_share`` where measured. Per loader: ``batches``, ``ready_share``, ``cores_used`` and
``verdict``, the index of ``report()``'s verdict kind in :data:`VERDICT_KINDS`. Values are
summed over the loader's epochs (``loader.stats()``). With several train dataloaders (a list or
dict, as Lightning's ``CombinedLoader`` takes them), each ThreadLoader's names carry its key or
index after ``threadloader/``: ``threadloader/images/fetch/p50_ms``, ``threadloader/0/...``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import torch

from torch_threadloader.loader import ThreadLoader
from torch_threadloader.stats import verdict

try:
    from lightning.pytorch import Callback
    from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
except ImportError:  # the older distribution's name
    try:
        from pytorch_lightning import Callback  # type: ignore[assignment]
        from pytorch_lightning.utilities import rank_zero_info, rank_zero_warn
    except ImportError as exc:
        raise ImportError(
            "torch_threadloader.lightning needs Lightning: pip install lightning (or pytorch-lightning)"
        ) from exc

if TYPE_CHECKING:
    from lightning.pytorch import LightningModule, Trainer

__all__ = ["LoaderStatsCallback", "PROFILER_NAMES", "VERDICT_KINDS", "loader_metrics", "train_threadloaders"]

#: The kinds of ``torch_threadloader.stats.verdict``, in the order of the logged ``verdict`` code.
VERDICT_KINDS = (
    "no-data",
    "training-bound",
    "fetch-bound",
    "transform-bound",
    "gil-bound",
    "cpu-bound",
    "collate-bound",
    "sampler-bound",
    "pin-bound",
)

#: Stats stage -> the name it is logged under (the caller's two stages take Lightning's
#: profiler action names; the loader's own keep theirs).
PROFILER_NAMES = {
    "handover": "train_dataloader_next",
    "train": "run_training_batch",
    "sampling": "sampling",
    "fetch": "fetch",
    "transform": "transform",
    "collate": "collate",
    "pin": "pin",
}
_LOADER_STAGES = ("sampling", "fetch", "transform", "collate", "pin")


def train_threadloaders(train_dataloader: Any) -> Iterator[tuple[str, ThreadLoader[Any]]]:
    """``(key, loader)`` for every ThreadLoader in ``train_dataloader`` (``trainer.train_dataloader``:
    a loader, or lists, tuples and dicts of them, nested), depth first in their order. The key is
    ``""`` for a bare loader, else the dict keys and list indices joined with ``/``."""

    def walk(obj: Any, path: tuple[str, ...]) -> Iterator[tuple[str, ThreadLoader[Any]]]:
        if isinstance(obj, ThreadLoader):
            yield "/".join(path), obj
        elif isinstance(obj, Mapping):
            for key, value in obj.items():
                yield from walk(value, (*path, str(key)))
        elif isinstance(obj, (list, tuple)):
            for index, value in enumerate(obj):
                yield from walk(value, (*path, str(index)))

    yield from walk(train_dataloader, ())


def loader_metrics(stats: Mapping[str, Any], prefix: str = "threadloader") -> dict[str, float]:
    """The metrics of one loader's ``stats()`` (``stats=True``), named ``{prefix}/{stage}/{metric}``
    and ``{prefix}/{batches,ready_share,cores_used,verdict}``; stages that saw nothing and values
    not measured are left out. See the module's docstring for the names."""
    out: dict[str, float] = {}
    for stage, name in PROFILER_NAMES.items():
        st = stats["stages"].get(stage)
        if not st or not st["count"]:
            continue
        base = f"{prefix}/{name}"
        out[f"{base}/count"] = float(st["count"])
        out[f"{base}/total_s"] = float(st["busy_s"])
        out[f"{base}/mean_ms"] = st["busy_s"] / st["count"] * 1e3
        for q in ("p50", "p90", "p99"):
            if st[f"{q}_s"] is not None:
                out[f"{base}/{q}_ms"] = st[f"{q}_s"] * 1e3
        if stage in _LOADER_STAGES:
            out[f"{base}/errors"] = float(st["errors"])
            out[f"{base}/retries"] = float(st["retries"])
            if st["cpu_share"] is not None:
                out[f"{base}/cpu_share"] = float(st["cpu_share"])
    out[f"{prefix}/batches"] = float(stats["batches"])
    for key in ("ready_share", "cores_used"):
        if stats.get(key) is not None:
            out[f"{prefix}/{key}"] = float(stats[key])
    kind, _ = verdict(dict(stats))
    if kind in VERDICT_KINDS:
        out[f"{prefix}/verdict"] = float(VERDICT_KINDS.index(kind))
    return out


def _distributed() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


class LoaderStatsCallback(Callback):
    """Logs the stats of the Trainer's train ThreadLoaders (built with ``stats=True``).

    At the end of each train epoch: through ``pl_module.log_dict`` (so the values also reach
    ``trainer.callback_metrics``), or, in a process group (DDP), each rank's own values
    straight to ``trainer.loggers`` (which write on rank zero), with no cross-rank reduction;
    and, with ``verbose``, each loader's verdict as text through ``rank_zero_info``. With ``every_n_steps``: also every that many train batches, written
    straight to ``trainer.loggers`` at ``trainer.global_step`` (Lightning's
    ``log_every_n_steps`` does not drop them). A ThreadLoader without stats, or no ThreadLoader
    at all, is named in one warning and nothing is logged for it. Holds no thread and no
    reference to a loader between hooks.
    """

    def __init__(self, every_n_steps: int | None = None, *, verbose: bool = True, prefix: str = "threadloader") -> None:
        if every_n_steps is not None and (
            isinstance(every_n_steps, bool) or not isinstance(every_n_steps, int) or every_n_steps < 1
        ):
            raise ValueError(f"every_n_steps must be a positive int or None, got {every_n_steps!r}")
        if not prefix or not isinstance(prefix, str):
            raise ValueError(f"prefix must be a non-empty str, got {prefix!r}")
        self.every_n_steps = every_n_steps
        self.verbose = bool(verbose)
        self.prefix = prefix
        self._batches = 0
        self._warned: set[str] = set()

    def _metrics(self, trainer: Trainer) -> tuple[dict[str, float], list[str]]:
        metrics: dict[str, float] = {}
        verdicts: list[str] = []
        found = False
        for key, loader in train_threadloaders(trainer.train_dataloader):
            found = True
            label = key or "train_dataloader"
            stats = loader.stats()
            if not stats["enabled"]:
                self._warn_once(
                    label,
                    f"LoaderStatsCallback: the train ThreadLoader {label!r} was built without stats=True; "
                    "nothing is logged for it",
                )
                continue
            prefix = f"{self.prefix}/{key}" if key else self.prefix
            metrics.update(loader_metrics(stats, prefix))
            verdicts.append(f"{prefix}: {verdict(stats)[1]}")
        if not found:
            self._warn_once(
                "", "LoaderStatsCallback: the Trainer's train dataloader holds no ThreadLoader; nothing is logged"
            )
        return metrics, verdicts

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            rank_zero_warn(message)

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._batches = 0

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self.every_n_steps is None:
            return
        self._batches += 1
        if self._batches % self.every_n_steps:
            return
        metrics, _ = self._metrics(trainer)
        if metrics:
            for logger in trainer.loggers:
                logger.log_metrics(metrics, step=trainer.global_step)

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        metrics, verdicts = self._metrics(trainer)
        if metrics and _distributed():
            # Each rank has its own loader and its own set of names: no cross-rank reduction
            # (which would wait forever on a name one rank lacks); rank zero's loggers write.
            for logger in trainer.loggers:
                logger.log_metrics(metrics, step=trainer.global_step)
        elif metrics:
            pl_module.log_dict(metrics, on_step=False, on_epoch=True, batch_size=1)
        if self.verbose:
            for line in verdicts:
                rank_zero_info(line)
