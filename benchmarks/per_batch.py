"""Experiment: ``num_workers=0``'s per-batch path as a share of a plain loop, on this interpreter.

    python -m benchmarks.per_batch [--rounds 9]      # any CPython >= 3.11 with torch

``ThreadLoader(num_workers=0)`` over the ``overhead`` dataset (``__getitem__`` returns the index,
so an epoch is nothing but the loader's own work) against the plain loop that does the same
work with no loader: torch's ``BatchSampler`` for the indices, ``[dataset[i] for i in indices]``
and the same ``collate_fn``. Batches as plain lists (``collate_fn`` returns the list: what is
left is the loader's path itself) and as tensors (``default_collate``, which ThreadLoader
replaces by its exact fast path). Batch 1, 32 and 256; rounds interleaved (each round times
every configuration once, in turn), the first round dropped; times are the calling thread's
CPU time (all of the work is on it). Prints µs per batch (median) and
the share of the plain loop (plain time over ThreadLoader's: 1.0 is as fast), median and
range over the rounds. See docs/performance.md ("The per-batch path on 3.13").
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from torch.utils.data import BatchSampler, SequentialSampler, default_collate

from benchmarks.workloads.overhead import IndexDataset
from torch_threadloader import ThreadLoader

SIZES = ((1, 8_192), (32, 65_536), (256, 262_144))


def as_list(batch: list[int]) -> list[int]:
    return batch


def plain_loop(dataset: IndexDataset, batch_size: int, collate: Callable[[list[Any]], Any]) -> Iterator[Any]:
    getitem = dataset.__getitem__
    for indices in BatchSampler(SequentialSampler(dataset), batch_size, False):
        yield collate([getitem(i) for i in indices])


def epoch_seconds(batches: Iterable[Any]) -> float:
    """The calling thread's CPU time for the epoch: with ``num_workers=0`` all of the work is
    on it, and time spent descheduled (this machine's other core comes and goes) is left out."""
    start = time.thread_time()
    for _ in batches:
        pass
    return time.thread_time() - start


def measure(batch_size: int, items: int, lists: bool, rounds: int) -> tuple[float, float, list[float]]:
    """(ThreadLoader µs per batch, plain µs per batch, per-round shares), medians of the rounds."""
    dataset = IndexDataset(items)
    collate: Callable[[list[Any]], Any] = as_list if lists else default_collate
    ours: list[float] = []
    plain: list[float] = []
    with ThreadLoader(dataset, batch_size=batch_size, collate_fn=as_list if lists else None) as loader:
        for round_ in range(rounds + 1):
            a = epoch_seconds(loader)
            b = epoch_seconds(plain_loop(dataset, batch_size, collate))
            if round_:
                ours.append(a)
                plain.append(b)
    per = 1e6 / (items // batch_size)
    shares = [p / o for p, o in zip(plain, ours, strict=True)]
    return statistics.median(ours) * per, statistics.median(plain) * per, shares


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.per_batch", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args(argv)
    gil = getattr(sys, "_is_gil_enabled", lambda: True)()
    print(f"Python {sys.version.split()[0]} ({'GIL' if gil else 'free-threaded'})")
    print("| batches | batch | ThreadLoader nw=0, µs | plain loop, µs | share of the plain loop (range) |")
    print("|---|---:|---:|---:|---|")
    for lists in (True, False):
        for batch_size, items in SIZES:
            ours, plain, shares = measure(batch_size, items, lists, args.rounds)
            kind = "lists" if lists else "tensors"
            print(
                f"| {kind} | {batch_size} | {ours:.2f} | {plain:.2f} | "
                f"{statistics.median(shares):.0%} ({min(shares):.0%} - {max(shares):.0%}) |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
