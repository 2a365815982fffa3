"""Ray Train and Ray Data with ThreadLoaders: a TorchTrainer with 2 CPU workers on a local cluster.

Each worker trains from a ThreadLoader kept by our ``prepare_data_loader`` (its DistributedSampler
shard, loaded by the worker's own threads) and reads its Ray Data shard through ``RayDataSource``,
the per-sample last mile on its threads; the driver then resumes a Ray Data epoch exactly.

Offline, on CPU: python examples/frameworks_ray.py
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import ray
import ray.data
import ray.train
import ray.train.torch
import torch
from ray.train import RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer

from torch_threadloader import ThreadLoader
from torch_threadloader.integrations.ray_data import RayDataSource
from torch_threadloader.integrations.ray_train import prepare_data_loader

ROWS = 64


class Squares(torch.utils.data.Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __len__(self) -> int:
        return 32

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.tensor([i / 32.0])
        return x, x * x


def last_mile(row: dict[str, Any]) -> tuple[int, int]:
    """The per-sample work Ray hands to this process: here, the row's id and who ran it."""
    return int(row["id"]), os.getpid()


def train_loop(config: dict[str, Any]) -> None:
    """One Ray Train worker: an epoch from a prepared ThreadLoader, then its Ray Data shard."""
    loader = prepare_data_loader(ThreadLoader(Squares(), batch_size=4, shuffle=True, num_workers=2))
    model = ray.train.torch.prepare_model(torch.nn.Linear(1, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader.sampler.set_epoch(0)  # type: ignore[attr-defined]
    steps = 0
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        steps += 1
    graph = RayDataSource(ray.train.get_dataset_shard("train"), batch_size=8).map(last_mile, num_threads=2)
    shard = list(ThreadLoader(graph, batch_size=None, num_workers=1))
    rank = ray.train.get_context().get_world_rank()
    report = {"class": type(loader).__name__, "steps": steps, "pid": os.getpid(), "shard": shard}
    Path(config["out"], f"rank{rank}.json").write_text(json.dumps(report))
    loader.close()


def exact_resume() -> bool:
    """A ThreadLoader over a Ray Dataset, stopped after 3 batches and resumed from its state."""

    def make() -> ThreadLoader[Any]:
        graph = RayDataSource(ray.data.range(40), batch_size=8).map(lambda r: int(r["id"]) * 10).batch(4)
        return ThreadLoader(graph.collate(), num_workers=1)

    full = [b.tolist() for b in make()]
    part = make()
    it = iter(part)
    first = [next(it).tolist() for _ in range(3)]
    state = part.state_dict()
    it.close()
    resumed = make()
    resumed.load_state_dict(state)
    return first + [b.tolist() for b in resumed] == full


def main() -> None:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    context = ray.data.DataContext.get_current()
    context.execution_options.preserve_order = True  # deterministic execution: an exact resume
    context.enable_progress_bars = False
    try:
        with tempfile.TemporaryDirectory() as out:
            TorchTrainer(
                train_loop,
                train_loop_config={"out": out},
                scaling_config=ScalingConfig(num_workers=2, use_gpu=False, resources_per_worker={"CPU": 0.5}),
                run_config=RunConfig(storage_path=os.path.join(out, "ray"), name="frameworks_ray"),
                datasets={"train": ray.data.range(ROWS)},
            ).fit()
            reports = [json.loads(Path(out, f"rank{r}.json").read_text()) for r in (0, 1)]
        for rank, r in enumerate(reports):
            pids = {pid for _, pid in r["shard"]}
            where = "its own process" if pids == {r["pid"]} else f"processes {sorted(pids)}"
            print(
                f"worker {rank} (pid {r['pid']}): {r['class']}, {r['steps']} steps; {len(r['shard'])} rows in {where}"
            )
        rows = sorted(i for r in reports for i, _ in r["shard"])
        print(f"Ray Data shards: {len(rows)} rows, each once: {rows == list(range(ROWS))}")
        print("Ray Data epoch resumed after 3 batches:", "exact" if exact_resume() else "DIFFERENT")
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
