"""Experiment: the per-batch costs of a batch of Python numbers, in µs (``timeit``, best of 9).

    python -m benchmarks.number_batches

Index batches: torch's ``BatchSampler`` against ``torch_threadloader.batching.FastBatches``
(where the loader has it) over a sequential and a random sampler. Collation of a list of ints:
``torch.tensor`` (``default_collate``), ``fast_default_collate`` as the loader has it, the
``frombuffer`` conversion with and without ``.clone()``, and the element-type checks. Then
whether each kind of tensor can be resized and shared. See docs/performance.md.
"""

from __future__ import annotations

import array
import sys
import timeit
from typing import Any

import numpy as np
import torch
from torch.utils.data import BatchSampler, RandomSampler, SequentialSampler

from torch_threadloader.collate import fast_default_collate

try:
    from torch_threadloader.batching import FastBatches
except ImportError:  # before 51b6af6
    FastBatches = None  # type: ignore[assignment,misc]


FROMBUFFER = "torch.frombuffer(array.array('q', batch), dtype=torch.int64)"


def _best(stmt: str, number: int, env: dict[str, Any]) -> float:
    return min(timeit.repeat(stmt, number=number, repeat=9, globals=env)) / number * 1e6


def main() -> int:
    rows: dict[str, dict[int, float]] = {}
    for size, n in ((1, 4096), (32, 65536), (256, 262144)):
        for kind, sampler in (("sequential", SequentialSampler(range(n))), ("random", RandomSampler(range(n)))):
            batches = BatchSampler(sampler, size, False)
            per_batch = _best("for _ in b: pass", 3, {"b": batches}) / len(batches)
            rows.setdefault(f"BatchSampler, {kind}", {})[size] = per_batch
            if FastBatches is not None:
                fast = FastBatches(batches)
                rows.setdefault(f"FastBatches (islice), {kind}", {})[size] = _best(
                    "for _ in b: pass", 3, {"b": fast}
                ) / len(batches)
        env = {"batch": list(range(size)), "torch": torch, "array": array, "fast": fast_default_collate}
        for label, stmt in (
            ("torch.tensor(batch) (default_collate)", "torch.tensor(batch)"),
            ("fast_default_collate(batch)", "fast(batch)"),
            ("frombuffer(array.array('q', batch)).clone()", f"{FROMBUFFER}.clone()"),
            ("frombuffer(array.array('q', batch)), no clone", FROMBUFFER),
            ("all(type(x) is int for x in batch)", "all(type(x) is int for x in batch)"),
            ("len(set(map(type, batch))) == 1", "len(set(map(type, batch))) == 1"),
        ):
            rows.setdefault(label, {})[size] = _best(stmt, 3000, env)
    print("| µs per batch | 1 | 32 | 256 |")
    print("|---|---:|---:|---:|")
    for label, by_size in rows.items():
        print(f"| {label} | " + " | ".join(f"{by_size[s]:.2f}" for s in (1, 32, 256)) + " |")
    print()
    makers = {
        "torch.tensor": lambda: torch.tensor([1, 2, 3]),
        "frombuffer(...).clone()": lambda: torch.frombuffer(array.array("q", [1, 2, 3]), dtype=torch.int64).clone(),
        "frombuffer(...)": lambda: torch.frombuffer(array.array("q", [1, 2, 3]), dtype=torch.int64),
        "from_numpy(np.array(...))": lambda: torch.from_numpy(np.array([1, 2, 3], dtype=np.int64)),
    }
    print("| tensor | resize_(10) | share_memory_() |")
    print("|---|---|---|")
    for label, make in makers.items():
        cells = []
        for op in ("resize_", "share_memory_"):
            tensor = make()
            try:
                tensor.resize_(10) if op == "resize_" else tensor.share_memory_()
                cells.append("works")
            except RuntimeError as error:
                cells.append(f"raises: {error}")
        print(f"| {label} | {cells[0]} | {cells[1]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
