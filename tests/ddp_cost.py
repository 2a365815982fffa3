"""One rank of a two-process gloo group (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR/PORT`` set by
tests/loader/test_by_cost.py): batches cut by ``max_batch_cost`` under a DistributedSampler,
where rank 1's samples (the odd ones) are all long and rank 0's short. A whole epoch, the same
epoch stopped after 3 batches and resumed, and one without agreeing batch sizes
(``cost_sync=False``, a count only: it would hang a training step). Then the same samples as an
``IterableDataset`` (each rank streams its own, rank 1's all long) with ``cost_sync=True``: the
ranks step together and end at the first one's end; stopped and resumed; and unsynced. With
``--processes``, only the ``IterableDataset``'s runs, its two workers in two worker processes (the
ranks agree in the loader's process). Writes what it saw as JSON."""

from __future__ import annotations

import json
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import Dataset, DistributedSampler, IterableDataset

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


def costed_loader(**kw: Any) -> ThreadLoader[Any]:
    sampler = DistributedSampler(range(SAMPLES), shuffle=False)
    return ThreadLoader(
        Samples(), batch_size=16, sampler=sampler, num_workers=2, max_batch_cost=BUDGET, sample_cost=cost_of,
        collate_fn=list, **kw,
    )  # fmt: skip


class RankStream(IterableDataset[int]):
    """This rank's samples (``rank, rank + 2, ...``: rank 1's all long), shared by its workers
    (the rank read here: a worker process has no process group)."""

    def __init__(self) -> None:
        self.rank = dist.get_rank()

    def __iter__(self) -> Iterator[int]:
        info = torch.utils.data.get_worker_info()
        w, k = (0, 1) if info is None else (info.id, info.num_workers)
        return iter(list(range(self.rank, SAMPLES, 2))[w::k])


#: The IterableDataset's two workers: threads, or (``--processes``) one in each of two worker processes.
WORKERS: dict[str, int] = {"num_workers": 2}


def make_stream(**kw: Any) -> ThreadLoader[Any]:
    return ThreadLoader(
        RankStream(), batch_size=16, max_batch_cost=BUDGET, sample_cost=cost_of, collate_fn=list, **WORKERS, **kw
    )


def streamed() -> dict[str, Any]:
    """The IterableDataset's runs: whole, stopped after 2 batches and resumed, and unsynced."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with make_stream(cost_sync=True) as loader:
            full = list(loader)
        with make_stream(cost_sync=True) as part:
            it = iter(part)
            got = [next(it) for _ in range(2)]
            state = part.state_dict()  # a collective: both ranks take it
            it.close()
        with make_stream(cost_sync=True) as resumed_loader:
            resumed_loader.load_state_dict(state)
            rest = list(resumed_loader)
    with make_stream(cost_sync=False) as unsynced:
        count = sum(1 for _ in unsynced)
    warned = sum("cost_sync=True: another rank's IterableDataset ended" in str(w.message) for w in caught)
    return {"stream_full": full, "stream_resumed": got + rest, "stream_unsynced": count, "stream_warned": warned}


def write_results(out: str, processes: bool) -> None:
    dist.init_process_group("gloo")
    if processes:
        WORKERS.update(num_workers=1, worker_processes=2)
        with open(out, "w") as f:
            json.dump(streamed(), f)
        dist.barrier()
        dist.destroy_process_group()
        return
    with costed_loader() as loader:
        full = list(loader)
    with costed_loader() as part:
        it = iter(part)
        got = [next(it) for _ in range(3)]
        state = part.state_dict()  # a collective: both ranks take it
        it.close()
    with costed_loader() as resumed_loader:
        resumed_loader.load_state_dict(state)
        rest = list(resumed_loader)
    with costed_loader(cost_sync=False) as unsynced:
        count = sum(1 for _ in unsynced)
    stream = streamed()
    with open(out, "w") as f:
        json.dump({"full": full, "resumed": got + rest, "unsynced": count, **stream}, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    torch.manual_seed(0)
    write_results(sys.argv[-1], "--processes" in sys.argv[1:-1])
