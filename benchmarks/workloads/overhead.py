"""overhead: the loader's own cost per batch, with items that cost nothing to fetch."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from benchmarks.datasets import IndexDataset
from benchmarks.harness import Case, Scale, Target, Workload, threadloader, torch_configs

__all__ = ["WORKLOAD", "IndexDataset"]


@contextmanager
def _cases(scale: Scale, workdir: Path) -> Iterator[list[Case]]:
    cases = []
    for batch_size, items in (
        (1, scale.pick(4_096, 512, 64)),
        (32, scale.pick(65_536, 8_192, 256)),
        (256, scale.pick(262_144, 32_768, 1_024)),
    ):
        cases.append(
            Case(
                f"bs={batch_size}",
                configs=[
                    threadloader(num_workers=0),
                    threadloader(num_workers=2),
                    *torch_configs(2),
                ],
                items=items,
                batch_size=batch_size,
                datasets={"default": IndexDataset(items)},
            )
        )
    yield cases


WORKLOAD = Workload(
    name="overhead",
    description="In-memory items, `__getitem__` returns the index: the loader's own cost per batch "
    "(sampling, fetching, `default_collate`, hand-over).",
    cases=_cases,
    targets=[
        Target("overhead bs=1, num_workers=0", "bs=1", "ThreadLoader nw=0", "speedup", 10.0),
        Target("overhead bs=32, num_workers=0", "bs=32", "ThreadLoader nw=0", "speedup", 4.0),
        Target("overhead bs=256, num_workers=0", "bs=256", "ThreadLoader nw=0", "speedup", 2.0),
        Target(
            "overhead bs=32, 2 workers vs torch 2 workers",
            "bs=32",
            "ThreadLoader nw=2",
            "speedup",
            3.0,
            ("torch nw=2", "torch nw=2 persistent"),
        ),
    ],
)
