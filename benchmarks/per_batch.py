"""``num_workers=0``'s per-batch path beside a plain loop, torch's DataLoader and a lean loop.

    python -m benchmarks per_batch [--rounds 9] [--smoke]    # any CPython >= 3.11 with torch

Over the ``overhead`` dataset (``__getitem__`` returns the index, so an epoch is nothing but
the loader's own work), batch 1, 32 and 256, interleaved rounds (the first dropped):

- batches as plain lists (``collate_fn`` returns the list: what is left is the loader's path
  itself) and as tensors (``default_collate``, which ThreadLoader replaces by its exact fast
  path): ``ThreadLoader(num_workers=0)`` and the plain loop that does the same work with no
  loader (torch's ``BatchSampler`` for the indices, ``[dataset[i] for i in indices]``, the same
  ``collate_fn``);
- tensors only: torch's ``DataLoader(num_workers=0)``, and the least a loader can do in Python
  (``BatchSampler`` or plain ranges for the indices, ``torch.from_numpy(np.array(items))`` for
  the tensor). The gap between ThreadLoader and the lean loop is its own per-batch machinery.

Records µs per batch of the calling thread's CPU time (all of the work is on it; time spent
descheduled is left out) and of wall time, and per round the plain loop's time over
ThreadLoader's (``share of the plain loop``: 1.0 is as fast) and torch's over ThreadLoader's.
``overhead_floor`` is this suite.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import BatchSampler, DataLoader, SequentialSampler, default_collate

from benchmarks.datasets import IndexDataset, as_list
from benchmarks.result import Recorder, suite_parser
from benchmarks.timing import Timing, interleave, ratios, time_fresh_epoch
from torch_threadloader import ThreadLoader

SIZES = ((1, 8_192), (32, 65_536), (256, 262_144))
SMOKE_SIZES = ((1, 64), (32, 256))
THREADLOADER, PLAIN = "ThreadLoader nw=0", "plain loop"


def plain_loop(dataset: IndexDataset, batch_size: int, collate: Callable[[list[Any]], Any]) -> Iterator[Any]:
    getitem = dataset.__getitem__
    for indices in BatchSampler(SequentialSampler(dataset), batch_size, False):
        yield collate([getitem(i) for i in indices])


def lean_loop(dataset: IndexDataset, batch_size: int, sampler: bool) -> Iterator[torch.Tensor]:
    getitem = dataset.__getitem__
    n = len(dataset)
    batches: Iterable[Any] = (
        BatchSampler(SequentialSampler(dataset), batch_size, False)
        if sampler
        else (range(s, min(s + batch_size, n)) for s in range(0, n, batch_size))
    )
    for indices in batches:
        yield torch.from_numpy(np.array([getitem(i) for i in indices], dtype=np.int64))


def runs(
    dataset: IndexDataset, batch_size: int, lists: bool, loader: ThreadLoader[Any]
) -> dict[str, Callable[[], Any]]:
    """Each configuration: what one epoch iterates."""
    collate: Callable[[list[Any]], Any] = as_list if lists else default_collate
    out: dict[str, Callable[[], Any]] = {
        THREADLOADER: lambda: loader,
        PLAIN: lambda: plain_loop(dataset, batch_size, collate),
    }
    if not lists:
        out["torch nw=0"] = lambda: DataLoader(dataset, batch_size=batch_size)
        out["lean loop, torch BatchSampler"] = lambda: lean_loop(dataset, batch_size, True)
        out["lean loop, range batches"] = lambda: lean_loop(dataset, batch_size, False)
    return out


def measure(batch_size: int, items: int, lists: bool, rounds: int) -> dict[str, list[Timing]]:
    """Each configuration's epoch timings over ``rounds`` interleaved rounds (one warm-up first)."""
    dataset = IndexDataset(items)
    with ThreadLoader(dataset, batch_size=batch_size, collate_fn=as_list if lists else None) as loader:
        made = runs(dataset, batch_size, lists, loader)
        timings = interleave({k: functools.partial(time_fresh_epoch, make) for k, make in made.items()}, rounds)
    batches = -(-items // batch_size)
    assert all(t.count == batches for ts in timings.values() for t in ts), "an epoch lost batches"
    return timings


def main(argv: Sequence[str] | None = None, *, suite: str = "per_batch") -> int:
    parser = suite_parser(suite, __doc__)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args(argv)
    rounds = 2 if args.smoke else args.rounds
    recorder = Recorder(suite, argv)
    for lists in (True, False):
        kind = "lists" if lists else "tensors"
        for batch_size, items in SMOKE_SIZES if args.smoke else SIZES:
            timings = measure(batch_size, items, lists, rounds)
            case, per = f"{kind}, batch {batch_size}", 1e6 / -(-items // batch_size)
            params = {"items": items, "batch_size": batch_size, "rounds": rounds}
            for config, ts in timings.items():
                recorder.add(case, config, "CPU per batch (this thread)", [t.thread * per for t in ts], "µs", **params)
                recorder.add(case, config, "wall per batch", [t.wall * per for t in ts], "µs", **params)
            ours = [t.thread for t in timings[THREADLOADER]]
            shares = ratios([t.thread for t in timings[PLAIN]], ours)
            recorder.add(case, THREADLOADER, "share of the plain loop", shares, "x", **params)
            if "torch nw=0" in timings:
                walls = [t.wall for t in timings[THREADLOADER]]
                speedup = ratios([t.wall for t in timings["torch nw=0"]], walls)
                recorder.add(case, THREADLOADER, "speed vs torch nw=0", speedup, "x", **params)
    return recorder.finish(args)


if __name__ == "__main__":
    sys.exit(main())
