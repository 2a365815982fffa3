"""startup: time from ``iter(loader)`` to the first batch, for a fresh loader and its second epoch."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from benchmarks.harness import Case, Scale, Target, Workload, threadloader, torch_configs
from benchmarks.workloads.overhead import IndexDataset

__all__ = ["WORKLOAD"]


@contextmanager
def _cases(scale: Scale, workdir: Path) -> Iterator[list[Case]]:
    items = 256
    yield [
        Case(
            "first batch",
            configs=[
                threadloader(num_workers=0),
                threadloader(num_workers=2),
                threadloader(num_workers=2, persistent_workers=True),
                *torch_configs(2),
            ],
            items=items,
            batch_size=32,
            datasets={"default": IndexDataset(items)},
            mode="startup",
            rounds=scale.pick(12, 4, 1),
            notes="Each round makes a fresh loader of each configuration and times `iter()` to the "
            "first batch (fresh), drains the epoch, then times `iter()` to the first batch again "
            "(second epoch). The first round is a warm-up (except in smoke runs). Without "
            "persistent workers an epoch starts its worker threads, as torch's starts processes.",
        )
    ]


WORKLOAD = Workload(
    name="startup",
    description="Time from `iter(loader)` to the first batch: a fresh loader, and its second epoch "
    "(256 in-memory items, batch 32).",
    cases=_cases,
    targets=[
        Target(
            "startup, 2 workers (fresh loader)",
            "first batch",
            "ThreadLoader nw=2",
            "first_batch",
            4.0,
            ("torch nw=2", "torch nw=2 persistent"),
        ),
        Target(
            # Like for like: torch's best second epoch is its persistent workers'.
            "startup, 2 workers (second epoch)",
            "first batch",
            "ThreadLoader nw=2 persistent",
            "first_batch_second_epoch",
            4.0,
            ("torch nw=2", "torch nw=2 persistent"),
        ),
    ],
    processes_note="",
)
