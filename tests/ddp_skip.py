"""One rank of a two-process gloo group (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR/PORT`` set by
tests/loader/test_skip.py): 1% corrupt samples skipped under a DistributedSampler, a whole epoch, and
the same epoch stopped after 3 batches and resumed. Writes what it saw as JSON."""

from __future__ import annotations

import json
import sys
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DistributedSampler

from tests.loader.test_skip import Corrupt
from torch_threadloader import ThreadLoader

SAMPLES = 400
CORRUPT = {7, 50, 51, 123, 300}  # 1.25%
BATCH = 8


def skipping_loader() -> ThreadLoader[Any]:
    sampler = DistributedSampler(range(SAMPLES), shuffle=True, seed=3)
    return ThreadLoader(
        Corrupt(bad=CORRUPT, n=SAMPLES), batch_size=BATCH, sampler=sampler, num_workers=2, on_error="skip"
    )


def write_results_of_skips(out: str) -> None:
    dist.init_process_group("gloo")
    full_loader = skipping_loader()
    full = [b.tolist() for b in full_loader]
    errors = sorted(r["index"] for r in full_loader.errors())
    part = skipping_loader()
    it = iter(part)
    got = [next(it).tolist() for _ in range(3)]
    state = part.state_dict()  # a collective: both ranks take it
    it.close()
    resumed_loader = skipping_loader()
    resumed_loader.load_state_dict(state)
    rest = [b.tolist() for b in resumed_loader]
    result = {
        "sizes": [len(b) for b in full],
        "batch_size": BATCH,
        "full": full,
        "resumed": got + rest,
        "errors": errors,
        "resumed_errors": sorted(r["index"] for r in resumed_loader.errors()),
    }
    with open(out, "w") as f:
        json.dump(result, f)
    for loader in (full_loader, part, resumed_loader):
        loader.close()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    torch.manual_seed(0)
    write_results_of_skips(sys.argv[1])
