"""memory: peak memory of the whole process tree for a dataset holding 2 million Python strings."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from torch.utils.data import Dataset

from benchmarks.harness import Case, Config, Scale, Target, Workload, threadloader

__all__ = ["WORKLOAD", "StringsDataset", "make_dataset"]


class StringsDataset(Dataset[str]):
    """``size`` distinct Python strings in a list; item ``i`` is string ``i``."""

    def __init__(self, size: int) -> None:
        self.strings = [f"sample/{i:09d}/caption {i * 7919 % 100_003}" for i in range(size)]

    def __len__(self) -> int:
        return len(self.strings)

    def __getitem__(self, index: int) -> str:
        return self.strings[index]


def make_dataset(size: int) -> StringsDataset:
    """Builds the dataset inside the probe's fresh process."""
    return StringsDataset(size)


def _configs() -> list[Config]:
    return [
        threadloader(num_workers=0),
        threadloader(num_workers=2),
        Config("torch nw=0", "torch", {"num_workers": 0}),
        Config("torch nw=2", "torch", {"num_workers": 2}),
    ]


@contextmanager
def _cases(scale: Scale, workdir: Path) -> Iterator[list[Case]]:
    items = scale.pick(2_000_000, 100_000, 20_000)
    common = (
        f"{items:,} strings; one epoch per configuration, each in a fresh process. Persistent workers "
        "are left out: for one epoch they are the same processes as `nw=2`."
    )
    cases = [
        Case(
            "in order",
            configs=_configs(),
            items=items,
            batch_size=32,
            mode="memory",
            memory_factory="benchmarks.workloads.memory:make_dataset",
            notes=common,
        )
    ]
    if scale.name == "full":
        cases.append(
            Case(
                "shuffled",
                configs=_configs(),
                items=items,
                batch_size=32,
                loader_options={"shuffle": True, "seed": 0},
                mode="memory",
                memory_factory="benchmarks.workloads.memory:make_dataset",
                notes=common + " `shuffle=True`: torch's `RandomSampler` (which both loaders use) "
                "materialises the epoch's permutation as a Python list of ints, about 36 bytes per item, "
                "in every configuration.",
            )
        )
    yield cases


WORKLOAD = Workload(
    name="memory",
    description="Peak memory of the whole process tree for a dataset holding 2 million Python strings "
    "(one epoch, batch 32), above the same process holding just the dataset.",
    cases=_cases,
    targets=[Target("memory, 2 workers", "in order", "ThreadLoader nw=2", "mib_above_dataset", 5.0)],
    processes_note="Forked workers share the parent's pages copy-on-write, but reading a Python "
    "object writes its reference count, so every page of strings a worker touches is copied into "
    "that worker: each worker ends up with its own copy of the dataset. Threads share one copy.",
)
