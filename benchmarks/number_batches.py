"""The per-batch costs of a batch of Python numbers, in µs (``timeit``, 9 repeats).

    python -m benchmarks number_batches [--smoke]

Index batches: torch's ``BatchSampler`` against ``torch_threadloader.batching.FastBatches``
(where the loader has it) over a sequential and a random sampler. Collation of a list of ints:
``torch.tensor`` (``default_collate``), ``fast_default_collate`` as the loader has it, the
``frombuffer`` conversion with and without ``.clone()``, and the element-type checks. Then
whether each kind of tensor can be resized and shared (1: it can, 0: it raises).
"""

from __future__ import annotations

import array
import sys
import timeit
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import BatchSampler, RandomSampler, SequentialSampler

from benchmarks.result import Recorder, suite_parser
from torch_threadloader.batching import FastBatches
from torch_threadloader.collate import fast_default_collate

FROMBUFFER = "torch.frombuffer(array.array('q', batch), dtype=torch.int64)"


def _per_call(stmt: str, number: int, env: dict[str, Any], repeat: int) -> list[float]:
    """µs per call of ``stmt``, for each of ``repeat`` repeats of ``number`` calls."""
    return [t / number * 1e6 for t in timeit.repeat(stmt, number=number, repeat=repeat, globals=env)]


COLLATIONS = (
    ("torch.tensor(batch) (default_collate)", "torch.tensor(batch)"),
    ("fast_default_collate(batch)", "fast(batch)"),
    ("frombuffer(array.array('q', batch)).clone()", f"{FROMBUFFER}.clone()"),
    ("frombuffer(array.array('q', batch)), no clone", FROMBUFFER),
    ("all(type(x) is int for x in batch)", "all(type(x) is int for x in batch)"),
    ("len(set(map(type, batch))) == 1", "len(set(map(type, batch))) == 1"),
)


def index_batches(recorder: Recorder, size: int, n: int, repeat: int) -> None:
    for kind, sampler in (("sequential", SequentialSampler(range(n))), ("random", RandomSampler(range(n)))):
        batches = BatchSampler(sampler, size, False)
        for label, source in (
            (f"BatchSampler, {kind}", batches),
            (f"FastBatches (islice), {kind}", FastBatches(batches)),
        ):
            per_epoch = _per_call("for _ in b: pass", 3, {"b": source}, repeat)
            recorder.add(f"batch {size}", label, "time per batch", [t / len(batches) for t in per_epoch], "µs")


def tensor_kinds(recorder: Recorder) -> None:
    makers = {
        "torch.tensor": lambda: torch.tensor([1, 2, 3]),
        "frombuffer(...).clone()": lambda: torch.frombuffer(array.array("q", [1, 2, 3]), dtype=torch.int64).clone(),
        "frombuffer(...)": lambda: torch.frombuffer(array.array("q", [1, 2, 3]), dtype=torch.int64),
        "from_numpy(np.array(...))": lambda: torch.from_numpy(np.array([1, 2, 3], dtype=np.int64)),
    }
    for label, make in makers.items():
        for op in ("resize_", "share_memory_"):
            tensor = make()
            try:
                tensor.resize_(10) if op == "resize_" else tensor.share_memory_()
                works = 1.0
            except RuntimeError:
                works = 0.0
            recorder.add("tensor kinds", label, f"{op} works", [works], "")


def main(argv: Sequence[str] | None = None, *, suite: str = "number_batches") -> int:
    parser = suite_parser(suite, __doc__)
    args = parser.parse_args(argv)
    repeat, number = (2, 10) if args.smoke else (9, 3000)
    sizes = ((1, 64), (32, 256)) if args.smoke else ((1, 4096), (32, 65536), (256, 262144))
    recorder = Recorder(suite, argv)
    for size, n in sizes:
        index_batches(recorder, size, n, repeat)
        env = {"batch": list(range(size)), "torch": torch, "array": array, "fast": fast_default_collate}
        for label, stmt in COLLATIONS:
            recorder.add(f"batch {size}", label, "time per call", _per_call(stmt, number, env, repeat), "µs")
    tensor_kinds(recorder)
    return recorder.finish(args)


if __name__ == "__main__":
    sys.exit(main())
