"""One rank of a two-process gloo group (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR/PORT`` set by
tests/loader/test_by_cost.py): batches cut by ``max_batch_cost`` under a DistributedSampler,
where rank 1's samples (the odd ones) are all long and rank 0's short. A whole epoch, the same
epoch stopped after 3 batches and resumed, and one without agreeing batch sizes
(``cost_sync=False``, a count only: it would hang a training step). Writes what it saw as JSON."""

from __future__ import annotations

import json
import sys
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import Dataset, DistributedSampler

from torch_threadloader import ThreadLoader

SAMPLES = 120
BUDGET = 100


def cost_of(sample: int) -> int:
    """Odd samples (rank 1's under an unshuffled DistributedSampler) cost 60, even ones 5."""
    return 60 if sample % 2 else 5


class Samples(Dataset[int]):
    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, i: int) -> int:
        return i


def make(**kw: Any) -> ThreadLoader[Any]:
    sampler = DistributedSampler(range(SAMPLES), shuffle=False)
    return ThreadLoader(
        Samples(), batch_size=16, sampler=sampler, num_workers=2, max_batch_cost=BUDGET, sample_cost=cost_of,
        collate_fn=list, **kw,
    )  # fmt: skip


def main(out: str) -> None:
    dist.init_process_group("gloo")
    with make() as loader:
        full = list(loader)
    with make() as part:
        it = iter(part)
        got = [next(it) for _ in range(3)]
        state = part.state_dict()  # a collective: both ranks take it
        it.close()
    with make() as resumed_loader:
        resumed_loader.load_state_dict(state)
        rest = list(resumed_loader)
    with make(cost_sync=False) as unsynced:
        count = sum(1 for _ in unsynced)
    with open(out, "w") as f:
        json.dump({"full": full, "resumed": got + rest, "unsynced": count}, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    torch.manual_seed(0)
    main(sys.argv[1])
