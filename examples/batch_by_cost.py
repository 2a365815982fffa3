"""Batches by cost: token budgets instead of a fixed ``batch_size``, with a locally trained tokenizer.

Offline: a small BPE tokenizer (the ``tokenizers`` package) is trained on a generated corpus
whose texts have lognormal lengths, and the dataset tokenizes each text in ``__getitem__``. The
same epoch is batched two ways at the same peak of padded tokens per batch: a fixed
``batch_size``, and ``max_batch_cost`` (``cost_mode="padded"``, ``group_window``). Prints the
steps and the share of padding each way, then resumes a cost-batched epoch exactly; then the
same texts as an ``IterableDataset`` stream, each worker cutting its share by cost, resumed
exactly too.

    python examples/batch_by_cost.py --texts 2000
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Iterator

import torch
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import Dataset, IterableDataset, get_worker_info

from torch_threadloader import ThreadLoader

WORDS = [
    "the",
    "a",
    "loader",
    "batch",
    "token",
    "sample",
    "thread",
    "budget",
    "cost",
    "window",
    "rank",
    "epoch",
    "step",
    "model",
    "data",
    "pad",
]


def corpus(n: int, seed: int = 0) -> list[str]:
    """``n`` texts of lognormal length (median about 40 words, a long tail)."""
    rng = random.Random(seed)
    return [
        " ".join(
            rng.choice(WORDS) + rng.choice(["", "s", "ing", "ed"]) for _ in range(int(rng.lognormvariate(3.7, 1.0)) + 1)
        )
        for _ in range(n)
    ]


def train_tokenizer(texts: list[str]) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(vocab_size=200, special_tokens=["[PAD]", "[UNK]"], show_progress=False)
    tokenizer.train_from_iterator(texts, trainer)
    return tokenizer


class Texts(Dataset[torch.Tensor]):
    """Text ``i``, tokenized: a 1-D tensor of token ids."""

    def __init__(self, texts: list[str], tokenizer: Tokenizer) -> None:
        self.texts, self.tokenizer = texts, tokenizer

    def __len__(self) -> int:
        return len(self.texts)

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.tensor(self.tokenizer.encode(self.texts[i]).ids)


class TextStream(IterableDataset[torch.Tensor]):
    """The texts as a stream, tokenized; worker ``w`` of ``k`` reads texts ``w, w + k, ...``."""

    def __init__(self, texts: list[str], tokenizer: Tokenizer) -> None:
        self.texts, self.tokenizer = texts, tokenizer

    def __iter__(self) -> Iterator[torch.Tensor]:
        info = get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        for text in self.texts[start::step]:
            yield torch.tensor(self.tokenizer.encode(text).ids)


def pad(batch: list[torch.Tensor]) -> torch.Tensor:
    return pad_sequence(batch, batch_first=True)  # [PAD] is id 0


def tokens(sample: torch.Tensor) -> int:
    return len(sample)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--texts", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()
    texts = corpus(args.texts)
    data = Texts(texts, train_tokenizer(texts))
    fixed = list(ThreadLoader(data, batch_size=args.batch_size, num_workers=2, collate_fn=pad))
    budget = max(batch.numel() for batch in fixed)  # the peak padded tokens per batch, kept
    useful = sum(len(data[i]) for i in range(len(data)))

    def by_cost(**kw: object) -> ThreadLoader[torch.Tensor]:
        return ThreadLoader(
            data, batch_size=256, num_workers=2, collate_fn=pad, shuffle=True, generator=torch.Generator().manual_seed(0),
            max_batch_cost=budget, sample_cost=tokens, cost_mode="padded", group_window=512, **kw,
        )  # fmt: skip

    with by_cost() as loader:
        cut = list(loader)
    for name, batches in (("batch_size", fixed), ("max_batch_cost", cut)):
        padded = sum(batch.numel() for batch in batches)
        print(
            f"{name:>15}: {len(batches):4} steps, {1 - useful / padded:.0%} padding, peak {max(b.numel() for b in batches)}"
        )
    assert all(batch.numel() <= budget or len(batch) == 1 for batch in cut)

    with by_cost() as loader:
        it = iter(loader)
        first = [next(it) for _ in range(3)]
        state = loader.state_dict()
        it.close()
    with by_cost() as resumed:
        resumed.load_state_dict(state)
        rest = list(resumed)
    same = all(torch.equal(a, b) for a, b in zip(first + rest, cut, strict=True))
    print(f"resumed after 3 batches: {'exact' if same else 'DIFFERENT'}")
    streamed(TextStream(texts, data.tokenizer), budget)


def streamed(stream: TextStream, budget: int) -> None:
    """An IterableDataset: each of the 2 workers cuts its own stream by cost, in turn."""

    def by_cost() -> ThreadLoader[torch.Tensor]:
        return ThreadLoader(
            stream, batch_size=256, num_workers=2, collate_fn=pad, max_batch_cost=budget, sample_cost=tokens,
            cost_mode="padded", group_window=256,
        )  # fmt: skip

    with by_cost() as loader:
        cut = list(loader)
        it = iter(loader)
        first = [next(it) for _ in range(5)]
        state = loader.state_dict()  # each worker's replay point
        it.close()
    with by_cost() as resumed:
        resumed.load_state_dict(state)
        rest = list(resumed)
    assert all(batch.numel() <= budget or len(batch) == 1 for batch in cut)
    same = all(torch.equal(a, b) for a, b in zip(first + rest, cut, strict=True))
    print(f"IterableDataset: {len(cut)} steps; resumed after 5 batches: {'exact' if same else 'DIFFERENT'}")


if __name__ == "__main__":
    main()
