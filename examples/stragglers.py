"""Batches from the samples that are ready: ``defer_stragglers=True`` beside ``in_order=False``.

Offline: each sample "fetches" by sleeping (the GIL released, as I/O), 1 in 50 of them 20x
longer. Prints the wall time of one epoch each way, and resumes a deferred epoch exactly.

    python examples/stragglers.py --samples 400
"""

from __future__ import annotations

import argparse
import time

from torch.utils.data import Dataset

from torch_threadloader import ThreadLoader


class Slow(Dataset[int]):
    def __init__(self, n: int, ms: float) -> None:
        self.n, self.s = n, ms / 1000

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        time.sleep(self.s * (20 if i % 50 == 7 else 1))
        return i


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=400)
    parser.add_argument("--ms", type=float, default=1.0)
    args = parser.parse_args()
    data = Slow(args.samples, args.ms)
    for name, kw in (("in_order=False", {"in_order": False}), ("defer_stragglers", {"defer_stragglers": True})):
        with ThreadLoader(data, batch_size=16, num_workers=2, item_concurrency=4, **kw) as loader:
            start = time.perf_counter()
            n = sum(len(b) for b in loader)
            print(f"{name:>17}: {n} samples in {time.perf_counter() - start:.2f} s")
    with ThreadLoader(data, batch_size=16, num_workers=4, shuffle=True, defer_stragglers=True) as loader:
        it = iter(loader)
        head = [int(i) for _ in range(3) for i in next(it)]
        state = loader.state_dict()
        it.close()
    with ThreadLoader(data, batch_size=16, num_workers=2, shuffle=True, defer_stragglers=True) as again:
        again.load_state_dict(state)
        rest = [int(i) for b in again for i in b]
    exact = sorted(head + rest) == list(range(args.samples))
    print(f"resumed after 3 batches: {'exact' if exact else 'NOT exact'}")


if __name__ == "__main__":
    main()
