"""Fixture datasets and runs shared by tests/integrations/.

``python -m tests.helpers_frameworks accelerate OUT`` runs :func:`accelerate_run` as one
process (a rank of a gloo group when ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``/``MASTER_*`` are
set, as torchrun sets them) and writes what it saw to ``OUT`` as JSON.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from torch_threadloader import ThreadLoader


class WhoLoads(Dataset[dict[str, Any]]):
    """Item ``i``: its index, ``x`` (a float feature), the process id and the thread name that
    loaded it, so a test can tell where its batches came from. ``fail_at`` raises there."""

    def __init__(self, n: int, fail_at: int | None = None) -> None:
        self.n = n
        self.fail_at = fail_at

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, Any]:
        if i == self.fail_at:
            raise KeyError(f"item {i} is broken")
        return {
            "index": i,
            "x": torch.tensor([float(i), 1.0]),
            "pid": os.getpid(),
            "thread": threading.current_thread().name,
        }


def where(batches: list[dict[str, Any]]) -> tuple[set[int], set[str]]:
    """The process ids and thread names that loaded ``batches``."""
    pids = {int(p) for b in batches for p in b["pid"]}
    threads = {t for b in batches for t in b["thread"]}
    return pids, threads


def indices(batches: list[dict[str, Any]]) -> list[list[int]]:
    return [[int(i) for i in b["index"]] for b in batches]


# -- accelerate ------------------------------------------------------------------------------
ACC_SAMPLES = 48  # a multiple of 2 ranks x ACC_BATCH: even_batches pads nothing
ACC_BATCH = 4
ACC_CUT = 3  # batches of the first epoch before save_state


def _accelerator() -> Any:
    from accelerate import Accelerator

    return Accelerator(cpu=True, mixed_precision="bf16")


def _ours(accelerator: Any) -> Any:
    from torch_threadloader.integrations.accelerate import prepare_threadloader

    torch.manual_seed(0)  # prepare_data_loader seeds the sampler's generator from it
    return prepare_threadloader(
        accelerator, ThreadLoader(WhoLoads(ACC_SAMPLES), batch_size=ACC_BATCH, shuffle=True, num_workers=2)
    )


def accelerate_run(checkpoint: str) -> dict[str, Any]:
    """Two epochs of accelerate's own loader and of a prepared ThreadLoader, a few bf16 steps,
    and the same two epochs stopped by ``save_state`` after ``ACC_CUT`` batches and resumed by a
    new Accelerator's ``load_state`` and ``skip_first_batches``."""
    from torch_threadloader.integrations.accelerate import AcceleratedThreadLoader, skip_first_batches

    acc = _accelerator()
    torch.manual_seed(0)
    theirs = acc.prepare(DataLoader(WhoLoads(ACC_SAMPLES), batch_size=ACC_BATCH, shuffle=True))
    accelerate_epochs = [indices(list(theirs)) for _ in range(2)]

    model = torch.nn.Sequential(torch.nn.Linear(2, 1))
    dtypes: set[str] = set()  # what the layer computes in (accelerate casts the model's output back)
    model[0].register_forward_hook(lambda module, args, out: dtypes.add(str(out.dtype)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = _ours(acc)
    model, optimizer, same = acc.prepare(model, optimizer, loader)
    epochs: list[list[dict[str, Any]]] = []
    ends: list[bool] = []
    devices: set[str] = set()
    for _ in range(2):
        seen = []
        for batch in loader:
            seen.append(batch)
            ends.append(bool(acc.gradient_state.end_of_dataloader))
            devices.add(str(batch["x"].device))
            out = model(batch["x"])
            acc.backward(out.float().mean())
            optimizer.step()
            optimizer.zero_grad()
        epochs.append(seen)
    pids, threads = where([b for e in epochs for b in e])

    stopped = _ours(acc := _accelerator())
    it = iter(stopped)
    first = [next(it) for _ in range(ACC_CUT)]
    acc.save_state(checkpoint)
    it.close()
    resumed = _ours(acc := _accelerator())
    acc.load_state(checkpoint)
    resumed = skip_first_batches(resumed, ACC_CUT)
    rest = [list(resumed) for _ in range(2)]
    return {
        "pid": os.getpid(),
        "rank": acc.process_index,
        "world": acc.num_processes,
        "class_kept": isinstance(loader, AcceleratedThreadLoader) and isinstance(loader, ThreadLoader),
        "prepare_passes_it_through": same is loader,
        "accelerate": accelerate_epochs,
        "ours": [indices(e) for e in epochs],
        "pids": sorted(pids),
        "threads": sorted(threads),
        "ends": ends,
        "dtypes": sorted(dtypes),
        "devices": sorted(devices),
        "device": str(acc.device),
        "resumed": [indices(first) + indices(rest[0]), indices(rest[1])],
    }


# -- Ray Train -------------------------------------------------------------------------------
def collate_listed(batch: list[Any]) -> list[Any]:
    """A ``collate_fn`` other than the default, importable in a Ray worker."""
    return list(batch)


def init_nothing(worker_id: int) -> None:
    """A ``worker_init_fn`` other than the default, importable in a Ray worker."""
    del worker_id


#: A value other than the default for every setting a rebuild keeps (the sampler and batching
#: are the rebuild's own), each compatible with the others: one loader carries them all. Left
#: out, as they do not go together with these: worker processes (``worker_processes``,
#: ``process_nice``, ``process_affinity``, ``worker_method``) and straggler mode
#: (``defer_stragglers``, ``straggler_window``); tests/integrations/test_settings_kept.py
#: covers each through the same ``loader_settings`` one by one.
RAY_KEPT_SETTINGS: dict[str, Any] = {
    "num_workers": 2,
    "pin_memory": True,
    "generator": torch.Generator().manual_seed(3),
    "collate_fn": collate_listed,
    "timeout": 5.0,
    "worker_init_fn": init_nothing,
    "multiprocessing_context": "spawn",
    "prefetch_factor": 3,
    "persistent_workers": True,
    "pin_memory_device": "cpu",
    "in_order": False,
    "item_concurrency": 2,
    "return_indices": True,
    "stats": True,
    "on_error": "skip",
    "max_errors": 3,
    "max_bytes_in_flight": 1 << 20,
    "worker_copy": "deep",
    "per_sample_rng": True,
    "own_random_state": False,
}


def _plain_setting(loader: ThreadLoader[Any], name: str) -> Any:
    value = loader.multiprocessing_context if name == "multiprocessing_context" else vars(loader)[name]
    if name == "multiprocessing_context" and value is not None and not isinstance(value, str):
        return value.get_start_method()
    return value


def ray_settings_lost() -> list[str]:
    """The settings of :data:`RAY_KEPT_SETTINGS` that Ray Train's ``prepare_data_loader`` (ours,
    in this Ray worker) does not keep when it rebuilds the loader with a DistributedSampler."""
    import warnings

    from torch_threadloader.integrations.ray_train import prepare_data_loader

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # multiprocessing_context on threads says it does nothing
        given = ThreadLoader(list(range(16)), batch_size=4, **RAY_KEPT_SETTINGS)
        prepared = prepare_data_loader(given)
    lost = [
        f"{name}: {_plain_setting(prepared, name)!r}"
        for name in RAY_KEPT_SETTINGS
        if _plain_setting(prepared, name) != _plain_setting(given, name)
    ]
    if prepared is given:
        lost.append("not rebuilt")
    prepared.close()
    given.close()
    return lost


def ray_train_loop(config: dict[str, Any]) -> None:
    """One Ray Train worker: a ThreadLoader over a map-style dataset, prepared, and one over
    this worker's Ray Data shard; writes where its batches came from."""
    import ray.train
    import ray.train.torch

    import datapipes as dp
    from torch_threadloader.integrations.ray_data import RayDataSource
    from torch_threadloader.integrations.ray_train import prepare_data_loader

    context = ray.train.get_context()
    loader = prepare_data_loader(ThreadLoader(list(range(32)), batch_size=4, shuffle=True, num_workers=2))
    loader.sampler.set_epoch(0)  # type: ignore[attr-defined]
    seen, threads = [], set()
    for batch in loader:
        seen.append(batch.tolist())
        threads.add(threading.current_thread().name)
    shard = ray.train.get_dataset_shard("train")
    graph = dp.ThreadMapper(
        RayDataSource(shard, batch_size=8),
        lambda r: (int(r["id"]), os.getpid(), threading.current_thread().name),
        num_threads=2,
        name="last-mile",
    )
    shard_rows = list(ThreadLoader(graph, batch_size=None, num_workers=1))
    model = ray.train.torch.prepare_model(torch.nn.Linear(1, 1))
    out = model(torch.tensor([[float(len(seen))]]))
    out.sum().backward()
    result = {
        "rank": context.get_world_rank(),
        "pid": os.getpid(),
        "class": type(loader).__name__,
        "is_threadloader": isinstance(loader, ThreadLoader),
        "sampler": type(loader.sampler).__name__,
        "seen": seen,
        "shard": [r[0] for r in shard_rows],
        "shard_pids": sorted({r[1] for r in shard_rows}),
        "shard_threads": sorted({r[2] for r in shard_rows}),
        "settings_lost": ray_settings_lost(),
    }
    Path(config["out"], f"rank{result['rank']}.json").write_text(json.dumps(result))
    loader.close()


def main(argv: list[str]) -> None:
    what, out = argv
    if what != "accelerate":
        raise SystemExit(f"unknown run {what!r}")
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = os.environ.get("CHECKPOINT_DIR", tmp)
        result = accelerate_run(checkpoint)
    Path(out).write_text(json.dumps(result))
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
