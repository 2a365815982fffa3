"""local_files: read a 128 KB file and normalise it to float32 with NumPy."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from benchmarks.harness import Case, Config, Scale, Target, Workload, plain, threadloader, torch_configs
from torch_threadloader.images import BufferedCollate

__all__ = ["WORKLOAD", "FileDataset", "cpu_configs", "write_files"]

FILE_BYTES = 128 * 1024

#: Shared with image_augment.
PLAIN_NOTE = (
    "'no loader, 1 thread' and 'no loader, 2 threads' run the same work and `default_collate` with no "
    "loader: in the caller's thread with one intra-op thread, and on two plain threads (one intra-op "
    "thread each) handing batches over through a queue: the most two threads can do with this work on "
    "this machine, the ceiling of any thread loader."
)


def cpu_configs() -> list[Config]:
    """The configurations of a case whose items are CPU work on MiB-sized arrays (shared with
    image_augment): ThreadLoader with 0 and 2 workers, 2 also with reused batch buffers, torch's,
    and the work with no loader on 1 and on 2 threads (see :data:`PLAIN_NOTE`)."""
    return [
        threadloader(num_workers=0),
        threadloader(num_workers=2),
        threadloader("ThreadLoader nw=2 buffers", num_workers=2, collate_fn=BufferedCollate(capacity=10)),
        *torch_configs(2),
        plain(),
        plain(threads=2),
    ]


def write_files(directory: Path, count: int, size: int = FILE_BYTES) -> list[Path]:
    """``count`` files of ``size`` random bytes (seeded) in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    paths = []
    for i in range(count):
        path = directory / f"{i:05d}.bin"
        path.write_bytes(rng.integers(0, 256, size, dtype=np.uint8).tobytes())
        paths.append(path)
    return paths


class FileDataset(Dataset[torch.Tensor]):
    """Reads file ``i`` and returns it as float32, normalised: ``(x / 255 - 0.5) / 0.25``."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths = paths

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> torch.Tensor:
        with open(self.paths[index], "rb") as f:
            data = f.read()
        x = np.frombuffer(data, dtype=np.uint8).astype(np.float32)
        x *= 1.0 / (255.0 * 0.25)
        x -= 0.5 / 0.25
        return torch.from_numpy(x)


@contextmanager
def _cases(scale: Scale, workdir: Path) -> Iterator[list[Case]]:
    count = scale.pick(2_048, 512, 64)
    paths = write_files(workdir / "local_files", count)
    yield [
        Case(
            "128 KB files",
            configs=cpu_configs(),
            items=count,
            batch_size=32,
            datasets={"default": FileDataset(paths)},
            notes=f"{count} files of 128 KiB, written just before the run (so in the page cache). {PLAIN_NOTE}",
        )
    ]


WORKLOAD = Workload(
    name="local_files",
    description="Read a 128 KB file, normalise to float32 with NumPy (2,048 files, batch 32).",
    cases=_cases,
    targets=[
        Target("local_files", "128 KB files", "ThreadLoader nw=2", "speedup", 1.3),
        Target("local_files, reused buffers", "128 KB files", "ThreadLoader nw=2 buffers", "speedup", 1.3),
    ],
)
