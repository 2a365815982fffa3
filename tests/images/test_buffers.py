"""BufferedCollate: default_collate's values and structure; batches written into a small pool of
reused buffers, reused only when nothing references them; no new buffer after the first epoch."""

from __future__ import annotations

import collections
import copy
import pickle
import threading

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset, default_collate

from tests.fixtures.values import assert_same
from torch_threadloader import ThreadLoader
from torch_threadloader.images import BufferedCollate

Sample = collections.namedtuple("Sample", ["image", "label"])


class ImageItems(Dataset[tuple[torch.Tensor, int]]):
    """Item ``i``: a 3x8x8 float32 image filled with ``i`` and the label ``i % 5``."""

    def __init__(self, n: int, shape: tuple[int, ...] = (3, 8, 8)) -> None:
        self.n, self.shape = n, shape

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return torch.full(self.shape, float(i)), i % 5


def items(n: int, offset: int = 0) -> list[tuple[torch.Tensor, int]]:
    return [ImageItems(n + offset)[i] for i in range(offset, offset + n)]


@pytest.mark.parametrize(
    "batch",
    [
        items(4),
        [{"image": x, "label": y, "name": f"n{y}"} for x, y in items(4)],
        [Sample(x, y) for x, y in items(3)],
        [torch.arange(6, dtype=torch.uint8).reshape(2, 3) + i for i in range(5)],
        [(np.full((2,), i, dtype=np.int16), float(i)) for i in range(3)],
        [[torch.tensor(i), torch.zeros(2, dtype=torch.bool)] for i in range(3)],
    ],
    ids=["tuples", "dicts", "namedtuples", "uint8", "numpy-and-floats", "lists"],
)
def test_values_and_structure_are_default_collates(batch):
    collate = BufferedCollate()
    for _ in range(3):  # fresh buffers, then reused ones
        assert_same(collate(batch), default_collate(batch))


def test_mixed_shapes_raise_torchs_error():
    batch = [torch.zeros(2, 3), torch.zeros(3, 2)]
    with pytest.raises(RuntimeError) as theirs:
        default_collate(batch)
    with pytest.raises(RuntimeError) as ours:
        BufferedCollate()(batch)
    assert str(ours.value) == str(theirs.value)
    mixed_dtypes = [torch.zeros(2), torch.zeros(2, dtype=torch.float64)]
    assert_same(BufferedCollate()(mixed_dtypes), default_collate(mixed_dtypes))


def test_a_buffer_is_reused_only_when_nothing_references_it():
    collate = BufferedCollate(capacity=4)
    first = collate(items(4))
    view = first[0][1]  # a view keeps the memory in use
    array = first[0].numpy()  # so does a NumPy array on it
    del first
    second = collate(items(4, offset=10))
    assert collate.stats().allocations == 2
    del view
    third = collate(items(4, offset=20))
    assert collate.stats().allocations == 3  # the NumPy array still holds the first buffer
    del array
    fourth = collate(items(4, offset=30))
    assert collate.stats().allocations == 3 and collate.stats().reuses == 1
    for batch, offset in ((second, 10), (third, 20), (fourth, 30)):
        assert_same(batch, default_collate(items(4, offset)))


def test_kept_batches_keep_their_values_and_the_pool_stays_bounded():
    collate = BufferedCollate(capacity=3)
    kept = [collate(items(4, offset=4 * k)) for k in range(10)]
    for k, batch in enumerate(kept):
        assert_same(batch, default_collate(items(4, offset=4 * k)))
    stats = collate.stats()
    assert stats.allocations == 10 and stats.retained == 3 and stats.unretained == 7
    del kept
    collate(items(4))
    assert collate.stats().reuses == 1 and collate.stats().allocations == 10


def test_a_short_last_batch_gets_its_own_buffer_and_shapes_are_evicted_when_full():
    collate = BufferedCollate(capacity=2)
    collate(items(4))
    collate(items(3))
    assert collate.stats().retained == 2
    collate(items(2))  # a third shape: the idle buffer of another shape makes room
    stats = collate.stats()
    assert stats.retained == 2 and stats.unretained == 0 and stats.allocations == 3


def run_epochs(loader, dataset, epochs: int, collate: BufferedCollate) -> list:
    stats = []
    for _ in range(epochs):
        for b, batch in enumerate(loader):
            assert_same(batch, default_collate([dataset[i] for i in range(8 * b, min(8 * b + 8, len(dataset)))]))
        stats.append(collate.stats())
    return stats


def test_no_buffer_per_batch_in_the_callers_thread():
    dataset = ImageItems(70)  # 8 batches of 8 and a short one of 6
    collate = BufferedCollate(capacity=5)
    stats = run_epochs(ThreadLoader(dataset, batch_size=8, collate_fn=collate), dataset, 5, collate)
    # Two buffers of 8 (the batch the loop holds, the one being written) and one of 6; the
    # previous epoch's iterator can hold its last batch a while longer (one more of each at most).
    assert stats[0].allocations == 3
    assert stats[-1].allocations <= 5
    assert stats[-1].allocations == stats[1].allocations  # nothing new after the second epoch
    assert stats[-1].allocations + stats[-1].reuses == 5 * 9


@pytest.mark.parametrize(
    ("num_workers", "options"), [(2, {}), (2, {"item_concurrency": 2}), (3, {"persistent_workers": True})]
)
def test_worker_threads_allocate_a_bounded_number_of_buffers_not_one_per_batch(num_workers, options):
    dataset = ImageItems(70)
    # At most: prefetch_factor (2) batches per worker loading or waiting, the batch each worker
    # thread has just handed over, the loop's batch and the previous one, and a short last one.
    bound = 2 * num_workers + num_workers + 2 + 1
    collate = BufferedCollate(capacity=bound)
    loader = ThreadLoader(dataset, batch_size=8, num_workers=num_workers, collate_fn=collate, **options)
    stats = run_epochs(loader, dataset, 4, collate)
    loader.close()
    # At most `bound` buffers for 36 batches: no allocation per batch. (How many of them the
    # first epoch needs depends on how far its workers ran ahead: on 3.13t, in a full run,
    # 3 in the first epoch and 6 by the fourth.)
    assert stats[-1].allocations <= bound
    assert stats[-1].unretained == 0
    assert stats[-1].allocations + stats[-1].reuses == 4 * 9


def test_concurrent_callers_never_share_a_buffer():
    collate = BufferedCollate(capacity=4)
    results: dict[int, list[tuple[int, object]]] = {}
    errors: list[BaseException] = []

    def work(thread: int) -> None:
        try:
            out = []
            for k in range(30):
                offset = 1000 * thread + 10 * k
                out.append((offset, collate(items(4, offset))))
                if len(out) > 2:
                    out.pop(0)  # keep the last two, drop older ones
                for held_offset, batch in out:
                    assert_same(batch, default_collate(items(4, held_offset)))
            results[thread] = out
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors[0]
    assert len(results) == 4


def test_pinning_happens_once_per_buffer_when_an_accelerator_is_there():
    collate = BufferedCollate(capacity=2, pin_memory=True)
    for _ in range(5):
        batch = collate(items(4))
        assert_same(batch, default_collate(items(4)))
    del batch
    stats = collate.stats()
    assert stats.allocations == 2  # the batch variable held one while the next was written
    if torch.accelerator.is_available():
        assert stats.pinned == stats.allocations
        assert collate(items(4))[0].is_pinned()
    else:
        assert stats.pinned == 0  # no accelerator: ordinary memory, nothing to pin


def test_copies_start_with_an_empty_pool_and_bad_capacity_is_named():
    collate = BufferedCollate(capacity=3, pin_memory=True)
    collate(items(2))
    for clone in (copy.deepcopy(collate), pickle.loads(pickle.dumps(collate))):
        assert clone.capacity == 3 and clone.pin_memory is True
        assert clone.stats().allocations == 0
    for bad in (0, -1, True, 2.5):
        with pytest.raises(ValueError, match="capacity"):
            BufferedCollate(capacity=bad)  # type: ignore[arg-type]
