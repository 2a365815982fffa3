"""``ThreadLoader(worker_processes=P)`` gives what threads give: torch's batches for a seed
(worker ids and seeds included), an exact resume, and the stats and skip records gathered from
the processes. The lifecycle and errors of the processes are in ``test_processes.py``.

Both modes (``mode``, tests/processes/conftest.py) use the same total of workers ``W``:
``num_workers=W`` threads, or ``P=2`` processes of ``W // 2`` threads; thread ``t`` of process
``c`` is worker ``t * P + c``, so batch ``i`` is loaded by worker ``i % W`` in both, as by
torch's ``DataLoader(num_workers=W)``.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from tests.fixtures.datasets import (
    Shards,
    UnevenStream,
    moment,
)
from tests.fixtures.processes import (
    AsyncSeen,
    Big,
    FailsAtPair,
    FailsEvery,
    FailsWhileFlag,
    Jittered,
    Seen,
    W,
    loader_in,
    skip_only_value_errors_under_20,
)
from tests.fixtures.values import assert_same, flat, through_torch_save
from torch_threadloader import ThreadLoader
from torch_threadloader.skip import TooManyErrors

pytestmark = pytest.mark.usefixtures("no_child_left")  # every test closes its loaders: no worker process is left


# -- the same batches -------------------------------------------------------------------------


@pytest.mark.parametrize("shuffle", [False, True])
def test_the_batches_are_torchs_for_a_seed_worker_ids_and_seeds_included(mode: dict[str, int], shuffle: bool) -> None:
    ds = Seen(37)
    want = list(
        DataLoader(ds, batch_size=4, shuffle=shuffle, num_workers=W, generator=torch.Generator().manual_seed(7))
    )
    with loader_in(ds, mode, batch_size=4, shuffle=shuffle, generator=torch.Generator().manual_seed(7)) as ld:
        got = list(ld)
        second = list(ld)  # the processes are reused; the epoch draws a new base seed, as torch
    assert_same(got, want)
    assert len(second) == len(want) and not all(torch.equal(a, b) for a, b in zip(second, want, strict=True))


def test_persistent_workers_draw_as_torchs_epoch_after_epoch(mode: dict[str, int]) -> None:
    ds = Seen(14)
    kwargs: dict[str, Any] = {"batch_size": 3, "shuffle": True, "persistent_workers": True}
    theirs = DataLoader(ds, num_workers=W, generator=torch.Generator().manual_seed(2), **kwargs)
    want = [list(theirs), list(theirs)]
    with loader_in(ds, mode, generator=torch.Generator().manual_seed(2), **kwargs) as ld:
        assert_same([list(ld), list(ld)], want)


def test_no_batching_and_return_indices_are_torchs(mode: dict[str, int]) -> None:
    ds = Seen(9)

    def seed() -> torch.Generator:
        return torch.Generator().manual_seed(1)

    want = list(DataLoader(ds, batch_size=None, num_workers=W, generator=seed()))
    with loader_in(ds, mode, batch_size=None, generator=seed()) as ld:
        assert_same(list(ld), want)
    with loader_in(ds, mode, batch_size=4, return_indices=True, generator=seed()) as ld:
        got = list(ld)
    assert [indices for indices, _ in got] == [[0, 1, 2, 3], [4, 5, 6, 7], [8]]
    assert_same([batch for _, batch in got], list(DataLoader(ds, batch_size=4, num_workers=W, generator=seed())))


def test_out_of_order_and_item_concurrency_yield_every_batch_once(mode: dict[str, int]) -> None:
    with loader_in(Jittered(41), mode, batch_size=3, in_order=False, item_concurrency=3) as ld:
        got = flat(list(ld))
    assert sorted(got) == list(range(41))


def test_an_iterable_dataset_is_sharded_as_torch_shards_it(mode: dict[str, int]) -> None:
    want = list(DataLoader(Shards(24, pause=moment), batch_size=2, num_workers=W))
    with loader_in(Shards(24, pause=moment), mode, batch_size=2) as ld:
        assert_same(list(ld), want)


@pytest.mark.parametrize("drop_last", [False, True])
def test_workers_that_end_at_different_times_give_torchs_order(mode: dict[str, int], drop_last: bool) -> None:
    want = list(DataLoader(UnevenStream(), batch_size=2, num_workers=W, drop_last=drop_last))
    with loader_in(UnevenStream(), mode, batch_size=2, drop_last=drop_last) as ld:
        assert_same(list(ld), want)
        assert_same(list(ld), want)


def test_an_async_dataset_runs_batch_i_as_worker_i_mod_w(mode: dict[str, int]) -> None:
    with loader_in(AsyncSeen(22), mode, batch_size=2, item_concurrency=2) as ld:
        got = list(ld)
    assert flat([b[:, 0] for b in got]) == list(range(22))
    assert [int(b[0, 1]) for b in got] == [i % W for i in range(len(got))]


def test_pin_memory_without_an_accelerator_warns_once_and_loads(mode: dict[str, int]) -> None:
    if torch.accelerator.is_available():
        pytest.skip("an accelerator is there: batches are pinned")
    with loader_in(Seen(8), mode, batch_size=4, pin_memory=True) as ld, pytest.warns(UserWarning, match="pin"):
        assert flat([b[:, 0] for b in ld]) == list(range(8))


def test_tensors_come_back_whole(mode: dict[str, int]) -> None:
    with loader_in(Big(), mode, batch_size=4) as ld:
        got = list(ld)
    assert [float(b[k, 0, 0]) for b in got for k in range(4)] == [float(i) for i in range(16)]
    assert all(b.shape == (4, 128, 128) and bool((b[k] == b[k, 0, 0]).all()) for b in got for k in range(4))


# -- resume -----------------------------------------------------------------------------------


@pytest.mark.parametrize("in_order", [True, False])
def test_resume_at_several_cuts_gives_the_uninterrupted_epochs(mode: dict[str, int], in_order: bool) -> None:
    g = torch.Generator()
    with loader_in(Jittered(23), mode, batch_size=4, shuffle=True, generator=g, in_order=in_order) as ld:
        g.manual_seed(5)
        epoch0, epoch1 = flat(list(ld)), flat(list(ld))
        for k in (0, 1, 3, 5, 6):
            g.manual_seed(5)
            it = iter(ld)
            got = [next(it) for _ in range(k)]
            state = through_torch_save(ld.state_dict())
            del it
            g.manual_seed(99)  # the state brings the generator back
            ld.load_state_dict(state)
            rest = list(ld) if k < 6 else []
            done = flat(got + rest)
            after = flat(list(ld))
            if in_order:
                assert (done, after) == (epoch0, epoch1), k
            else:  # every sample once
                assert (sorted(done), sorted(after)) == (sorted(epoch0), sorted(epoch1)), k


@pytest.mark.parametrize("in_order", [True, False])
def test_an_async_dataset_resumes_exactly(mode: dict[str, int], in_order: bool) -> None:
    g = torch.Generator()
    with loader_in(AsyncSeen(22), mode, batch_size=2, shuffle=True, generator=g, in_order=in_order) as ld:
        g.manual_seed(4)
        want = flat([b[:, 0] for b in ld])
        g.manual_seed(4)
        it = iter(ld)
        got = [next(it) for _ in range(4)]
        state = through_torch_save(ld.state_dict())
        del it
        ld.load_state_dict(state)
        done = flat([b[:, 0] for b in got + list(ld)])
    assert done == want if in_order else sorted(done) == sorted(want)


@pytest.mark.parametrize("dataset", [Seen, AsyncSeen])
def test_a_resumed_epoch_loads_each_batch_on_the_worker_that_loads_it_uninterrupted(
    mode: dict[str, int], dataset: type[Any]
) -> None:
    """Batch ``p`` is worker ``p % W``'s in a resumed epoch too, whose positions start past 0
    (the items show the worker's id, and its seed for a map-style dataset)."""
    g = torch.Generator()
    with loader_in(dataset(22), mode, batch_size=2, shuffle=True, generator=g) as ld:
        g.manual_seed(6)
        want = [b.tolist() for b in ld]
        for k in (1, 3, 6):
            g.manual_seed(6)
            it = iter(ld)
            got = [next(it).tolist() for _ in range(k)]
            state = ld.state_dict()
            del it
            ld.load_state_dict(state)
            assert got + [b.tolist() for b in ld] == want, k


def test_a_state_moves_between_threads_and_processes() -> None:
    g = torch.Generator().manual_seed(3)
    with ThreadLoader(Jittered(23), batch_size=4, shuffle=True, generator=g, num_workers=W) as threads:
        want = flat(list(threads))
        g.manual_seed(3)
        it = iter(threads)
        got = [next(it) for _ in range(2)]
        state = threads.state_dict()
        del it
    with ThreadLoader(
        Jittered(23), batch_size=4, shuffle=True, generator=torch.Generator(), num_workers=1, worker_processes=2
    ) as processes:
        processes.load_state_dict(state)
        assert flat(got + list(processes)) == want


def test_an_iterable_dataset_resumes_per_worker(mode: dict[str, int]) -> None:
    with loader_in(Shards(26, pause=moment), mode, batch_size=2) as ld:
        want = flat(list(ld))
        for k in (1, 4, 7):
            it = iter(ld)
            got = [next(it) for _ in range(k)]
            state = ld.state_dict()
            del it
            ld.load_state_dict(state)
            assert flat(got + list(ld)) == want, k


# -- stats and skipping, gathered from the processes --------------------------------------------


def test_stats_true_gathers_every_stage_the_processes_ran() -> None:
    n, every = 40, 1000  # only index 0 fails
    with ThreadLoader(
        FailsEvery(n, every), batch_size=4, num_workers=2, worker_processes=2, stats=True, on_error="skip"
    ) as ld:
        for _ in range(2):
            batches = list(ld)
            assert flat(batches) == [1, *range(1, n)]  # 0 fails: the next of its batch fills its slot
        stats = ld.stats()
        report = ld.report()
    stages = stats["stages"]
    assert stages["fetch"]["count"] == 2 * n  # each __getitem__, timed in the process that ran it
    assert stages["fetch"]["errors"] == 2  # index 0, once per epoch
    assert stages["transform"]["count"] == 2 * (n - 1)  # the stage() blocks, in the processes
    assert stages["collate"]["count"] == 2 * n // 4
    assert stages["handover"]["count"] == stages["sampling"]["count"] == 2 * n // 4  # the caller's side
    assert stages["fetch"]["p50_s"] is not None and stages["fetch"]["busy_s"] > 0
    assert stats["worker_processes"] == 2 and stats["num_workers"] == 2
    assert stats["worker_processes_cpu_s"] > 0  # the children's CPU time is counted
    assert stats["process_cpu_s"] >= stats["worker_processes_cpu_s"]
    assert stats["skipped"] == 2
    assert "fetch" in report and "transform" in report


@pytest.mark.parametrize("in_order", [True, False])
def test_skipping_in_processes_gives_the_in_process_batches_and_records(in_order: bool) -> None:
    def run(**mode: Any) -> tuple[list[int], list[dict[str, Any]]]:
        with ThreadLoader(
            FailsEvery(30, 7),
            batch_size=4,
            shuffle=True,
            generator=torch.Generator().manual_seed(5),
            in_order=in_order,
            on_error="skip",
            **mode,
        ) as ld:
            got = [flat(list(ld)) for _ in range(2)]
            return got, ld.errors()

    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        return (r["epoch"], r["batch"], r["index"])

    batches, records = run(num_workers=4)
    got, got_records = run(num_workers=2, worker_processes=2)
    if in_order:
        assert got == batches
    else:
        assert [sorted(e) for e in got] == [sorted(e) for e in batches]
    assert sorted(got_records, key=key) == sorted(records, key=key)
    assert len(records) == 2 * 5  # 0, 7, 14, 21, 28 in each epoch, each named with its batch
    assert all(r["type"] == "ValueError" and r["batch"] is not None for r in got_records)


def test_max_errors_counts_the_whole_epoch_across_processes() -> None:
    def run(**mode: Any) -> list[Any]:
        out: list[Any] = []
        with ThreadLoader(FailsEvery(24, 5), batch_size=3, on_error="skip", max_errors=2, **mode) as ld:
            it = iter(ld)
            while True:
                try:
                    out.append(flat([next(it)]))
                except StopIteration:
                    return out
                except TooManyErrors as exc:
                    out.append(("too many", len(exc.errors)))

    # one worker in all: the failures are met in order, so the same batch crosses the limit
    expected = run(num_workers=1)
    assert ("too many", 3) in expected
    assert run(num_workers=1, worker_processes=1) == expected
    spread = run(num_workers=1, worker_processes=2)
    assert len(spread) == len(expected) and sum(isinstance(b, tuple) for b in spread) == 3  # 10, 15, 20


def test_an_on_error_callable_runs_in_the_processes_and_what_it_refuses_raises() -> None:
    with ThreadLoader(
        FailsEvery(25, 7), batch_size=5, num_workers=1, worker_processes=2, on_error=skip_only_value_errors_under_20
    ) as ld:
        it = iter(ld)
        got = [flat([next(it)]) for _ in range(4)]
        with pytest.raises(ValueError, match="bad item 21"):  # refused by the callable: its batch raises
            next(it)
        assert list(it) == []
        skipped = sorted(r["index"] for r in ld.errors())
    assert skipped == [0, 7, 14]
    assert got == [[1, 1, 2, 3, 4], [5, 6, 8, 8, 9], [10, 11, 12, 13, 10], [15, 16, 17, 18, 19]]


def test_skip_records_of_a_stopped_epoch_are_not_counted_in_the_next(tmp_path: Any) -> None:
    flag = tmp_path / "failing"
    flag.touch()
    with ThreadLoader(
        FailsWhileFlag(str(flag)), batch_size=2, num_workers=2, worker_processes=1, on_error="skip", max_errors=0
    ) as ld:
        it = iter(ld)
        next(it)
        time.sleep(0.4)  # batch 2 (index 4 fails: skipped) settles while batch 1 still loads
        it.close()  # break
        del it
        flag.unlink()  # nothing fails from now on
        time.sleep(1.2)  # the stopped epoch's calls end
        assert len(list(ld)) == 8  # with max_errors=0, a record counted here would raise TooManyErrors
        assert all(r["epoch"] == 1 for r in ld.errors())


@pytest.mark.parametrize("procs", [0, 1])
def test_the_batch_whose_failures_cross_max_errors_raises_too_many_errors(procs: int) -> None:
    # Batch 2 is indices 4 and 5, both failing: its second failure crosses max_errors=1, so that
    # batch raises TooManyErrors (in one process before it could find no sample to fill it with).
    with ThreadLoader(
        FailsAtPair(), batch_size=2, num_workers=1, worker_processes=procs, on_error="skip", max_errors=1
    ) as ld:
        outcomes: list[Any] = []
        it = iter(ld)
        for _ in range(8):
            try:
                outcomes.append(int(next(it)[0]))
            except TooManyErrors as exc:
                outcomes.append("too many")
                assert len(exc.errors) == 2
        assert outcomes == [0, 2, "too many", 6, 8, 10, 12, 14]
        assert len(ld.errors()) == 2


def test_an_on_error_callable_that_cannot_be_pickled_is_named() -> None:
    ld = ThreadLoader(Seen(8), batch_size=2, num_workers=1, worker_processes=1, on_error=lambda i, e: True)
    with pytest.raises(TypeError, match=r"on_error .* cannot be pickled"):
        iter(ld)
    ld.close()


def test_skip_records_survive_a_resume_in_processes() -> None:
    def make() -> ThreadLoader[Any]:
        return ThreadLoader(FailsEvery(30, 4), batch_size=3, num_workers=1, worker_processes=2, on_error="skip")

    with make() as whole:
        full = flat(list(whole))
        records = whole.errors()
    with make() as a:
        it = iter(a)
        first = [next(it) for _ in range(4)]
        state = a.state_dict()
        del it
    with make() as b:
        b.load_state_dict(state)
        rest = list(b)
        resumed = b.errors()

    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        return (r["batch"], r["index"])

    assert flat(first) + flat(rest) == full
    assert sorted(resumed, key=key) == sorted(records, key=key)
