"""A datapipes graph: sample, load on threads, batch, collate, prefetch; then resume mid-epoch.

python examples/datapipes_pipeline.py
"""

from __future__ import annotations

import time

import numpy as np
import torch

import datapipes as dp


def load(index: int) -> dict[str, object]:
    """Stands in for reading and decoding a file: NumPy work that releases the GIL."""
    rng = np.random.default_rng(index)
    image = rng.random((64, 64), dtype=np.float32)
    return {"image": torch.from_numpy(np.fft.ifft2(np.fft.fft2(image)).real.astype(np.float32)), "label": index % 10}


def build(dataset_size: int) -> dp.Node[dict[str, torch.Tensor]]:
    # The same graph as Prefetcher(Collator(Batcher(ThreadMapper(Sampler(...), load, ...), 16)), 2)
    return (
        dp.Sampler(dataset_size, shuffle=True, seed=0)
        .map(load, num_threads=4, max_pending=8)
        .batch(16, drop_last=True)
        .collate()
        .prefetch(2)
    )


def main() -> None:
    pipeline = build(256)
    start = time.perf_counter()
    with iter(pipeline) as epoch:
        for step, batch in enumerate(epoch):
            if step == 5:
                checkpoint = pipeline.state_dict()  # just after the 6th batch
            last = batch
    print(f"one epoch: {step + 1} batches of {tuple(last['image'].shape)} in {time.perf_counter() - start:.2f}s")

    resumed = build(256)
    resumed.load_state_dict(checkpoint)
    rest = list(resumed)
    print(
        f"resumed from the checkpoint after batch 6: {len(rest)} batches left, "
        f"labels of the first: {rest[0]['label'].tolist()}"
    )
    stats = pipeline.stats()
    mapper = stats["source"]["source"]["source"]
    print(
        f"ThreadMapper: {mapper['items_out']} items, busy {mapper['busy_s']:.2f}s over its threads, "
        f"peak {mapper['peak_buffered']} results waiting"
    )


if __name__ == "__main__":
    main()
