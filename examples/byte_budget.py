"""A memory bound in bytes for items of very different sizes: ``max_bytes_in_flight``.

Items from 4 KiB to 8 MiB; 4 workers with ``prefetch_factor=4`` could hold 16 batches (over
100 MiB) when the training step is slow; a budget of 24 MiB makes them wait for room instead.

    python examples/byte_budget.py
"""

from __future__ import annotations

import time

import numpy as np
from torch.utils.data import Dataset

from torch_threadloader import ThreadLoader

SIZES = (4096, 8 << 20, 256 << 10, 1 << 20)
MIB = 1 << 20


class Mixed(Dataset[np.ndarray]):
    def __len__(self) -> int:
        return 96

    def __getitem__(self, i: int) -> np.ndarray:
        return np.full(SIZES[i % len(SIZES)], i % 256, dtype=np.uint8)


def keep_as_list(items: list[np.ndarray]) -> list[np.ndarray]:
    return items


def main() -> None:
    budget = 24 * MIB
    loader = ThreadLoader(
        Mixed(), batch_size=4, num_workers=4, prefetch_factor=4, collate_fn=keep_as_list, max_bytes_in_flight=budget
    )
    with loader:
        for _ in loader:
            time.sleep(0.005)  # a slow training step: the workers run ahead until the budget is spent
        held = loader.stats()["budget"]
    print(
        f"budget {budget / MIB:.0f} MiB: the loader held at most {held['peak'] / MIB:.1f} MiB "
        f"(a batch is at most {sum(SIZES) / MIB:.1f} MiB); workers waited for room {held['waits']} times"
    )


if __name__ == "__main__":
    main()
