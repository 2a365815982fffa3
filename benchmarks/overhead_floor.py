"""Experiment: how fast can a Python loader's ``num_workers=0`` path go on the ``overhead`` workload?

    python -m benchmarks.overhead_floor

Times, interleaved, per batch: torch's ``DataLoader(num_workers=0)``, ``ThreadLoader(num_workers=0)``,
and the least a loader can do in Python: torch's ``BatchSampler`` (or plain ranges) for the
indices, ``[dataset[i] for i in indices]``, and ``torch.from_numpy(np.array(items, int64))`` for
the tensor (what ``default_collate`` makes of a list of ints, as a copy-free conversion, where
``torch.tensor(list)`` parses element by element). The gap between ThreadLoader and the lean
loop is ThreadLoader's own per-batch machinery; see docs/performance.md.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import BatchSampler, DataLoader, SequentialSampler

from benchmarks.workloads.overhead import IndexDataset
from torch_threadloader import ThreadLoader


def lean(dataset: IndexDataset, batch_size: int, sampler: bool) -> Iterator[torch.Tensor]:
    getitem = dataset.__getitem__
    n = len(dataset)
    batches: Iterable[Any] = (
        BatchSampler(SequentialSampler(dataset), batch_size, False)
        if sampler
        else (range(s, min(s + batch_size, n)) for s in range(0, n, batch_size))
    )
    for indices in batches:
        yield torch.from_numpy(np.array([getitem(i) for i in indices], dtype=np.int64))


def _runs(
    dataset: IndexDataset, batch_size: int, thread_loader: ThreadLoader
) -> dict[str, Callable[[], Iterable[Any]]]:
    """Each configuration, as a function that returns what one epoch iterates."""
    return {
        "torch nw=0": lambda: DataLoader(dataset, batch_size=batch_size),
        "ThreadLoader nw=0": lambda: thread_loader,
        "lean loop, torch BatchSampler": lambda: lean(dataset, batch_size, True),
        "lean loop, range batches": lambda: lean(dataset, batch_size, False),
    }


def main() -> int:
    print("| batch | configuration | µs per batch | vs torch nw=0 |")
    print("|---:|---|---:|---:|")
    for batch_size, n in ((1, 4096), (32, 65536), (256, 262144)):
        dataset = IndexDataset(n)
        thread_loader = ThreadLoader(dataset, batch_size=batch_size)
        runs = _runs(dataset, batch_size, thread_loader)
        times: dict[str, list[float]] = {k: [] for k in runs}
        for round_ in range(8):
            for label, make in runs.items():
                start = time.perf_counter()
                seen = 0
                for batch in make():
                    seen += batch.shape[0]
                assert seen == n
                if round_:
                    times[label].append(time.perf_counter() - start)
        thread_loader.close()
        base = statistics.median(times["torch nw=0"])
        for label, values in times.items():
            median = statistics.median(values)
            print(f"| {batch_size} | {label} | {1e6 * median / (n // batch_size):.2f} | {base / median:.1f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
