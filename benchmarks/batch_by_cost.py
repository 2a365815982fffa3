"""Batches by cost: ``max_batch_cost`` beside a fixed ``batch_size``, at the same peak padded tokens.

    python -m benchmarks batch_by_cost [--samples 4096] [--batch-size 16] [--rounds 3] [--smoke]

Sequence lengths are lognormal: median 300 tokens, 1% over 8,192 (sigma 1.41), capped at
``--max-len``; fixed per index. Each batch is padded to its longest sample, and the training
step is a torch op over the padded tensor (an embedding lookup of every padded token, then a
``d x d`` matmul): its cost grows with the padded tokens. The baseline is a fixed
``--batch-size`` (ThreadLoader's, and torch's ``DataLoader`` beside it); its largest padded batch (``batch_size`` times the longest sample of a
batch, over the epoch) is the budget the cost loaders get, so both hold the same peak padded
tokens per step: ``ThreadLoader(max_batch_cost=peak, cost_mode="padded")``, without and with
``group_window``. Per configuration: useful (non-pad) tokens per second of the epoch, the steps
and the padded share; the ratios to the fixed batch size are taken per round (the rounds
interleaved: all configurations run once per round, in a shuffled order).
"""

from __future__ import annotations

import functools
import math
import random
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader, Dataset

from benchmarks.result import Recorder, suite_parser
from benchmarks.timing import close, interleave, ratios
from torch_threadloader import ThreadLoader

#: The lognormal's sigma that puts 1% of the lengths over 8,192 with a median of 300.
SIGMA = math.log(8192 / 300) / 2.3263


def lengths(samples: int, max_len: int, seed: int = 0) -> list[int]:
    """Lognormal sequence lengths (median 300, 1% over 8,192), at least 1, at most ``max_len``."""
    rng = random.Random(seed)
    return [max(1, min(max_len, round(rng.lognormvariate(math.log(300), SIGMA)))) for _ in range(samples)]


class Sequences(Dataset[torch.Tensor]):
    """Sample ``i``: ``lengths[i]`` token ids."""

    def __init__(self, lens: list[int], vocab: int) -> None:
        self.lens = lens
        self.vocab = vocab

    def __len__(self) -> int:
        return len(self.lens)

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.arange(self.lens[i], dtype=torch.long) % self.vocab


def pad(batch: list[torch.Tensor]) -> torch.Tensor:
    return pad_sequence(batch, batch_first=True)


def token_count(sample: torch.Tensor) -> int:
    return int(sample.shape[0])


class Step:
    """The training step: every padded token looked up and multiplied (cost grows with them)."""

    def __init__(self, vocab: int, dim: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.table = torch.randn(vocab, dim, generator=g)
        self.weight = torch.randn(dim, dim, generator=g)

    def __call__(self, padded: torch.Tensor) -> float:
        return float((self.table[padded] @ self.weight).relu_().sum())


def peak_padded(lens: list[int], batch_size: int) -> int:
    """The largest padded batch (samples times its longest) of the fixed-size epoch, in order."""
    return max(len(lens[i : i + batch_size]) * max(lens[i : i + batch_size]) for i in range(0, len(lens), batch_size))


def configs(lens: list[int], args: Any) -> dict[str, Callable[[], Any]]:
    data = Sequences(lens, args.vocab)
    budget = peak_padded(lens, args.batch_size)
    by_cost = {
        "max_batch_cost": budget,
        "sample_cost": token_count,
        "cost_mode": "padded",
        "batch_size": args.cap,
        "collate_fn": pad,
        "num_workers": args.workers,
    }
    fixed = {"batch_size": args.batch_size, "collate_fn": pad, "num_workers": args.workers}
    return {
        f"torch batch_size={args.batch_size}": functools.partial(DataLoader, data, **fixed),
        f"ThreadLoader batch_size={args.batch_size}": functools.partial(ThreadLoader, data, **fixed),
        "max_batch_cost": functools.partial(ThreadLoader, data, **by_cost),
        f"max_batch_cost, group_window={args.window}": functools.partial(
            ThreadLoader, data, group_window=args.window, **by_cost
        ),
    }


def main(argv: Sequence[str] | None = None, *, suite: str = "batch_by_cost") -> int:
    parser = suite_parser(suite, __doc__)
    parser.add_argument("--samples", type=int, default=4096)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--cap", type=int, default=4096, help="batch_size of the cost loaders: the most samples")
    parser.add_argument("--window", type=int, default=512, help="group_window of the grouped cost loader")
    parser.add_argument("--max-len", type=int, default=16384)
    parser.add_argument("--vocab", type=int, default=1024)
    parser.add_argument("--dim", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    if args.smoke:
        args.samples, args.rounds, args.max_len, args.window = 256, 1, 2048, 64
    lens = lengths(args.samples, args.max_len)
    useful = sum(lens)
    step = Step(args.vocab, args.dim)
    made = configs(lens, args)

    def run(make: Callable[[], Iterable[torch.Tensor]]) -> tuple[float, int, float]:
        steps = padded = 0
        start = time.perf_counter()
        loader = make()
        for batch in loader:
            step(batch)
            steps += 1
            padded += batch.numel()
        wall = time.perf_counter() - start
        close(loader)
        return useful / wall, steps, 1 - useful / padded

    measured = interleave({name: functools.partial(run, make) for name, make in made.items()}, args.rounds)
    rates = {name: [m[0] for m in ms] for name, ms in measured.items()}
    fixed = rates[f"ThreadLoader batch_size={args.batch_size}"]
    torch_fixed = rates[f"torch batch_size={args.batch_size}"]
    recorder = Recorder(suite, argv)
    case = f"{args.samples} sequences, peak {peak_padded(lens, args.batch_size)} padded tokens"
    params = {k: getattr(args, k) for k in ("samples", "batch_size", "cap", "window", "max_len", "dim", "workers")}
    for name, ms in measured.items():
        recorder.add(case, name, "useful tokens/s", rates[name], "tokens/s", **params)
        recorder.add(case, name, "steps", [m[1] for m in ms], "steps", **params)
        recorder.add(case, name, "padded share", [m[2] for m in ms], "share", **params)
        recorder.add(case, name, "vs fixed batch_size", ratios(rates[name], fixed), "x", **params)
        recorder.add(case, name, "vs torch's fixed batch_size", ratios(rates[name], torch_fixed), "x", **params)
    return recorder.finish(args)


if __name__ == "__main__":
    sys.exit(main())
