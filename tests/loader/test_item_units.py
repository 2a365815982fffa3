"""Worker threads with ``item_concurrency > 1``: items, not batches, are the unit of
concurrency. At most ``num_workers * item_concurrency`` items load at once across every batch
loading, at most ``num_workers * prefetch_factor`` batches load or wait, a slot freed goes to the
earliest waiting item, and the batches are torch's (a worker's batches collated in its order)."""

from __future__ import annotations

import threading
import time
import warnings
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from tests.fixtures.datasets import GateAt
from torch_threadloader import ThreadLoader

PATIENCE = 60.0  # how long a helper waits for what the test expects, so that a failure fails, not hangs


@pytest.mark.parametrize("in_order", [True, False])
@pytest.mark.parametrize("num_workers", [1, 2])
def test_the_next_batches_items_start_while_one_item_holds_one_slot(num_workers: int, in_order: bool) -> None:
    """Item 0 is stuck; the other batches its worker is due to load (batch ``num_workers``, on
    another thread of that worker) still start: the slow item holds a slot, not its worker.
    (A worker thread per batch at a time would never start them while item 0 waits.)"""
    ds = GateAt(32, gated={0})
    later = set(range(4 * num_workers, 4 * num_workers + 4))  # batch num_workers: worker 0's next
    seen: list[bool] = []
    opener = threading.Thread(target=ds.open_when_started, args=(later, seen, PATIENCE))
    loader = ThreadLoader(ds, batch_size=4, num_workers=num_workers, item_concurrency=2, in_order=in_order)
    with loader:
        opener.start()
        try:
            got = [b.tolist() for b in loader]
        finally:
            ds.gate.set()
            opener.join()
    assert seen == [True]  # worker 0's next batch started while item 0 was stuck
    expected = [list(range(i, i + 4)) for i in range(0, 32, 4)]
    assert got == expected if in_order else sorted(got) == expected


class Tally:
    """What :class:`InFlightCounted`'s worker copies count together, under one lock."""

    def __init__(self, together: int) -> None:
        self.lock = threading.Lock()
        self.in_flight = 0
        self.most_in_flight = 0
        self.delivered = 0  # batches the test has taken (set by the test's loop)
        self.most_ahead = 0  # the most batches started beyond those delivered
        self.barrier = threading.Barrier(together, timeout=PATIENCE)


class InFlightCounted(Dataset[int]):
    """``ds[i] == i``, counting the calls in flight and the batches started ahead of those
    delivered; the first ``together`` items wait for each other (a barrier), so they must all
    be in flight at once. Each worker's (shallow) copy shares the :class:`Tally`."""

    def __init__(self, n: int, batch_size: int, together: int) -> None:
        self.n = n
        self.batch_size = batch_size
        self.together = together
        self.tally = Tally(together)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        tally = self.tally
        with tally.lock:
            tally.in_flight += 1
            tally.most_in_flight = max(tally.most_in_flight, tally.in_flight)
            tally.most_ahead = max(tally.most_ahead, i // self.batch_size + 1 - tally.delivered)
        try:
            if i < self.together:
                tally.barrier.wait()
            else:
                time.sleep(0.001 * (i % 3))
            return i
        finally:
            with tally.lock:
                tally.in_flight -= 1


@pytest.mark.parametrize("in_order", [True, False])
def test_items_in_flight_and_batches_ahead_stay_within_their_bounds(in_order: bool) -> None:
    """``num_workers=2, item_concurrency=3``: six items at once (the first six, three batches of
    two, wait for each other: more than two workers' batches at once), never more; at most
    ``num_workers * prefetch_factor`` batches loading or ready besides the one handed out."""
    workers, items, prefetch, size = 2, 3, 2, 2
    ds = InFlightCounted(48, size, together=workers * items)
    tally = ds.tally
    loader = ThreadLoader(
        ds,
        batch_size=size,
        num_workers=workers,
        item_concurrency=items,
        prefetch_factor=prefetch,
        in_order=in_order,
        worker_copy="shallow",
    )
    with loader:
        got = []
        for batch in loader:
            got.append(batch.tolist())
            with tally.lock:
                tally.delivered += 1
    assert sorted(got) == [[i, i + 1] for i in range(0, 48, 2)]
    assert tally.most_in_flight == workers * items
    # Batch k starts once k - workers * prefetch batches were delivered: at most that many loading
    # or ready, besides the one the loop was handed and has not counted yet.
    assert tally.most_ahead <= workers * prefetch + 1


class DrawingCollate:
    """A ``collate_fn`` that draws from torch's global generator (in a worker: the worker's)."""

    def __call__(self, items: list[torch.Tensor]) -> torch.Tensor:
        return torch.stack(items) * 1000 + torch.randint(0, 1000, (1,))


class Plain(Dataset[torch.Tensor]):
    def __len__(self) -> int:
        return 30

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(0.001 * (i % 4))  # items finish out of order
        return torch.tensor([i])


def _batches(cls: Any, *, epochs: int = 2, **kwargs: Any) -> list[list[list[int]]]:
    loader = cls(
        Plain(),
        batch_size=4,
        num_workers=2,
        shuffle=True,
        generator=torch.Generator().manual_seed(7),
        collate_fn=DrawingCollate(),
        **kwargs,
    )
    try:
        return [[b.flatten().tolist() for b in loader] for _ in range(epochs)]
    finally:
        if isinstance(loader, ThreadLoader):
            loader.close()


@pytest.mark.parametrize("persistent", [False, True])
def test_the_batches_are_torchs_with_a_collate_fn_that_draws(persistent: bool) -> None:
    """Batch ``p`` is worker ``p % num_workers``'s and each worker collates in its order, so a
    ``collate_fn`` drawing from the worker's random state gives torch's batches, epoch after
    epoch, whichever items finish first; ``in_order=False`` gives the same batches, in the
    order they finish."""
    theirs = _batches(DataLoader, persistent_workers=persistent)
    assert theirs == _batches(ThreadLoader, persistent_workers=persistent, item_concurrency=1)
    assert theirs == _batches(ThreadLoader, persistent_workers=persistent, item_concurrency=3)
    unordered = _batches(ThreadLoader, persistent_workers=persistent, item_concurrency=3, in_order=False)
    assert [sorted(epoch) for epoch in unordered] == [sorted(epoch) for epoch in theirs]


class DrawingItems(Plain):
    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(0.001 * (i % 4))
        return torch.tensor([i * 1000 + int(torch.randint(0, 1000, ()))])


def test_items_that_draw_give_the_same_batches_whatever_the_order() -> None:
    """Each item draws from its own state: the same batches in order, out of order and again."""

    def run(in_order: bool) -> list[list[int]]:
        with ThreadLoader(
            DrawingItems(),
            batch_size=4,
            num_workers=2,
            item_concurrency=3,
            in_order=in_order,
            generator=torch.Generator().manual_seed(3),
        ) as loader:
            return [b.flatten().tolist() for b in loader]

    first = run(True)
    assert first == run(True)
    assert sorted(first) == sorted(run(False))


@pytest.mark.parametrize("in_order", [True, False])
@pytest.mark.parametrize("items", [1, 2])
def test_a_resumed_epoch_yields_exactly_the_rest(in_order: bool, items: int) -> None:
    """(A worker's own random state starts afresh in a resumed epoch, as in torch: no collate_fn draws here.)"""

    def loader() -> ThreadLoader[Any]:
        return ThreadLoader(
            Plain(),
            batch_size=3,
            num_workers=2,
            item_concurrency=items,
            shuffle=True,
            in_order=in_order,
            generator=torch.Generator().manual_seed(5),
        )

    with loader() as whole:
        full = [b.flatten().tolist() for b in whole]
    with loader() as first:
        it = iter(first)
        head = [next(it).flatten().tolist() for _ in range(4)]
        state = first.state_dict()
    with loader() as second:
        second.load_state_dict(state)
        rest = [b.flatten().tolist() for b in second]
    if in_order:
        assert head + rest == full
    else:
        assert sorted(head + rest) == sorted(full)


class RaisesAt(Plain):
    def __getitem__(self, i: int) -> torch.Tensor:
        if i == 9:
            raise KeyError(f"item {i}")
        return super().__getitem__(i)


def test_an_error_is_raised_at_its_batchs_place_and_the_epoch_goes_on() -> None:
    with ThreadLoader(RaisesAt(), batch_size=4, num_workers=2, item_concurrency=3) as loader:
        it = iter(loader)
        got: list[object] = []
        while True:
            try:
                got.append(next(it).flatten().tolist())
            except StopIteration:
                break
            except KeyError as exc:
                got.append(exc.args[0])
    assert got[2] == "item 9"
    assert got[:2] + got[3:] == [[*range(i, min(i + 4, 30))] for i in range(0, 30, 4) if i != 8]


def test_on_error_skip_fills_the_batch_as_with_one_item_at_a_time() -> None:
    def run(items: int) -> tuple[list[list[int]], int]:
        with ThreadLoader(RaisesAt(), batch_size=4, num_workers=2, item_concurrency=items, on_error="skip") as loader:
            return [b.flatten().tolist() for b in loader], len(loader.errors())

    assert run(3) == run(1)


def test_worker_init_fn_runs_once_per_worker_per_epoch_and_once_with_persistent_workers() -> None:
    calls: list[int] = []
    lock = threading.Lock()

    def init(worker_id: int) -> None:
        with lock:
            calls.append(worker_id)

    for persistent, expected in ((False, [0, 0, 1, 1]), (True, [0, 1])):
        calls.clear()
        with ThreadLoader(
            Plain(), batch_size=4, num_workers=2, item_concurrency=3, worker_init_fn=init, persistent_workers=persistent
        ) as loader:
            for _ in range(2):
                assert [b.flatten().tolist() for b in loader] == [
                    list(range(i, min(i + 4, 30))) for i in range(0, 30, 4)
                ]
        assert sorted(calls) == expected


def test_persistent_workers_keep_their_batch_threads_across_epochs() -> None:
    """With persistent workers the kept pool has a thread per batch loading or ready (not one
    per worker left idle beside threads started each epoch): every epoch runs on the same ones."""
    seen: list[set[int]] = []

    def collate(batch: list[torch.Tensor]) -> torch.Tensor:  # runs on the batch's thread
        with lock:
            seen[-1].add(threading.get_ident())
        return torch.stack(batch)

    lock = threading.Lock()
    with ThreadLoader(
        Plain(), batch_size=2, num_workers=2, prefetch_factor=3, item_concurrency=2, persistent_workers=True,
        collate_fn=collate,
    ) as loader:  # fmt: skip
        before = {t.ident for t in threading.enumerate()}
        for _ in range(3):
            seen.append(set())
            assert sum(len(b) for b in loader) == 30
        kept = {t.ident for t in threading.enumerate()} - before
    assert seen[0] == seen[1] == seen[2], "each epoch ran its batches on threads of its own"
    assert seen[0] <= kept | before and len(seen[0]) <= 2 * 3


def test_a_failing_worker_init_fn_fails_that_workers_batches_and_the_epoch_ends() -> None:
    """Worker 0's start raises on each of its threads: its batches raise it, worker 1's load."""

    def init(worker_id: int) -> None:
        if worker_id == 0:
            raise ValueError("worker 0 refuses")

    def outcomes(items: int) -> list[object]:
        got: list[object] = []
        with ThreadLoader(Plain(), batch_size=4, num_workers=2, item_concurrency=items, worker_init_fn=init) as loader:
            it = iter(loader)
            while True:
                try:
                    got.append(next(it).flatten().tolist())
                except StopIteration:
                    return got
                except ValueError as exc:
                    got.append(str(exc))

    got = outcomes(3)
    assert got == outcomes(1)
    assert got[0::2] == ["worker 0 refuses"] * 4 and got[1] == [4, 5, 6, 7]


def test_stats_count_every_item_and_batch() -> None:
    with ThreadLoader(Plain(), batch_size=4, num_workers=2, item_concurrency=3, stats=True) as loader:
        assert [b.flatten().tolist() for b in loader] == [list(range(i, min(i + 4, 30))) for i in range(0, 30, 4)]
        stages = loader.stats()["stages"]
    assert stages["fetch"]["count"] == 30 and stages["fetch"]["errors"] == 0
    assert stages["collate"]["count"] == 8


def test_the_loader_warns_only_where_items_across_batches_cannot_reach_item_concurrency() -> None:
    """Worker threads' items span ``prefetch_factor`` batches: 2 workers x 8 items over batches
    of 4 are reached (2 batches of 4 each); 16 are not, and the warning names the
    ``prefetch_factor`` that reaches them."""
    from torch_threadloader import concurrency

    concurrency._forget_warnings()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ThreadLoader(Plain(), batch_size=4, num_workers=2, item_concurrency=8).close()
    with pytest.warns(RuntimeWarning, match=r"at most 16 items in flight, not 32.*prefetch_factor=4"):
        ThreadLoader(Plain(), batch_size=4, num_workers=2, item_concurrency=16).close()
