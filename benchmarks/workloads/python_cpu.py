"""python_cpu: pure-Python tokenising that holds the GIL, the honest case where processes win (torch's,
and ThreadLoader's ``worker_processes``)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from torch.utils.data import Dataset

from benchmarks.harness import Case, Scale, Target, Workload, threadloader, torch_configs

__all__ = ["WORKLOAD", "TokenizeDataset", "tokenize"]

MAX_TOKENS = 256
UNKNOWN = 1


def tokenize(text: str, vocab: dict[str, int], max_tokens: int = MAX_TOKENS) -> list[int]:
    """Lower-cases and splits ``text`` into words and punctuation, character by character, and
    maps them to ids (``UNKNOWN`` when not in ``vocab``); padded with 0 or cut to ``max_tokens``.
    Plain Python on purpose: it holds the GIL the whole time."""
    ids: list[int] = []
    word: list[str] = []
    for ch in text:
        if ch.isalnum():
            word.append(ch.lower())
            continue
        if word:
            ids.append(vocab.get("".join(word), UNKNOWN))
            word = []
        if not ch.isspace():
            ids.append(vocab.get(ch, UNKNOWN))
    if word:
        ids.append(vocab.get("".join(word), UNKNOWN))
    ids = ids[:max_tokens]
    ids.extend([0] * (max_tokens - len(ids)))
    return ids


class TokenizeDataset(Dataset[torch.Tensor]):
    """Item ``i``: text ``i`` (about 2.5 KB of English-like words), tokenised by :func:`tokenize`."""

    def __init__(self, size: int, words_per_text: int = 400) -> None:
        rng = random.Random(0)
        syllables = ["ka", "lo", "mi", "ne", "tu", "ra", "si", "po", "de", "fa", "gu", "he", "ji", "vo"]
        words = sorted({"".join(rng.choices(syllables, k=rng.randint(1, 4))) for _ in range(6000)})
        self.vocab = {w: i + 2 for i, w in enumerate(words[:4000])}
        self.vocab.update({p: len(self.vocab) + 2 + i for i, p in enumerate(".,;!?")})
        pool = []
        for _ in range(min(size, 256)):
            parts = []
            for _ in range(words_per_text):
                w = rng.choice(words)
                parts.append(w.capitalize() if rng.random() < 0.1 else w)
                if rng.random() < 0.08:
                    parts[-1] += rng.choice(".,;!?")
            pool.append(" ".join(parts))
        self.texts = pool
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor(tokenize(self.texts[index % len(self.texts)], self.vocab))


@contextmanager
def _cases(scale: Scale, workdir: Path) -> Iterator[list[Case]]:
    items = scale.pick(2_048, 512, 32)
    yield [
        Case(
            "tokenise 2.5 KB",
            configs=[
                threadloader(num_workers=0),
                threadloader(num_workers=2),
                threadloader("ThreadLoader wp=2", num_workers=1, worker_processes=2),
                *torch_configs(2),
            ],
            items=items,
            batch_size=32,
            datasets={"default": TokenizeDataset(items)},
        )
    ]


WORKLOAD = Workload(
    name="python_cpu",
    description="Pure-Python tokenising of ~2.5 KB texts that holds the GIL (batch 32).",
    cases=_cases,
    targets=[
        Target("python_cpu, num_workers=0", "tokenise 2.5 KB", "ThreadLoader nw=0", "speedup", 1.0, ("torch nw=0",)),
        Target(
            # Worker processes (one thread each, forkserver) against torch's best 2 processes
            "python_cpu, 2 worker processes",
            "tokenise 2.5 KB",
            "ThreadLoader wp=2",
            "speedup",
            0.95,
            ("torch nw=2", "torch nw=2 persistent"),
        ),
    ],
    processes_note="Pure-Python work holds the GIL, so on a GIL build of CPython only one thread "
    "runs it at a time: ThreadLoader's worker threads add no CPU, while torch's worker processes "
    "each have their own interpreter and use every core. With two free cores, torch with 2 "
    "persistent worker processes is the fastest loader; ThreadLoader can only match torch at "
    "num_workers=0, or with `worker_processes=2` (`ThreadLoader wp=2`: 2 processes of one thread each, "
    "started once and kept across epochs). On a free-threaded build (3.13t/3.14t) the threads run in parallel.",
)
