"""``max_batch_cost`` with an ``IterableDataset`` in worker processes: each worker's stream is
cut by cost in the process that reads it, and the loader gives exactly the batches it gives
with as many worker threads (hypothesis, batch for batch: ``drop_last``, ``group_window``,
``cost_mode``, ``batch_size``, lone samples over the budget, persistent workers, a dataset with
its own state); exact resume at several cuts, twice in a row; the over-budget records reach
the loader's ``stats()`` and warning; an error at its sample, named; ``timeout``, a close from
another thread and a lost process; nothing left running after an epoch."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fixtures.cost_streams import CostedShards, StatefulCostedShards, negative_at_4
from tests.fixtures.datasets import FileGate
from tests.fixtures.processes import loader_children, workers_in
from tests.fixtures.threads import WaitingConsumer, wait_for_no_loader_threads
from tests.fixtures.values import next_past_timeouts, through_torch_save
from torch_threadloader import ThreadLoader, WorkerProcessError
from torch_threadloader.loader import LoaderTimeoutError
from torch_threadloader.over_budget import BatchCostWarning

pytestmark = pytest.mark.usefixtures("no_child_left")  # every test closes its loaders: no worker process is left

cases = st.fixed_dictionaries(
    {
        "costs": st.lists(st.integers(0, 40), min_size=0, max_size=50),
        "max_batch_cost": st.integers(1, 60),
        "batch_size": st.integers(1, 7),
        "cost_mode": st.sampled_from(["sum", "padded"]),
        "group_window": st.one_of(st.none(), st.integers(1, 12)),
        "drop_last": st.booleans(),
        "workers": st.integers(1, 4),
        "stateful": st.booleans(),
    }
)


def _case_loader(mode: str, case: dict[str, Any], **kw: Any) -> ThreadLoader[Any]:
    """``case``'s loader with its ``workers`` in threads or worker processes (thread ``t`` of
    process ``c`` is worker ``t * P + c``, as :func:`workers_in` says)."""
    case = dict(case)
    costs, workers = case.pop("costs"), case.pop("workers")
    dataset = (StatefulCostedShards if case.pop("stateful") else CostedShards)(costs)
    return ThreadLoader(
        dataset, sample_cost=dataset.cost, collate_fn=list, **workers_in(mode, workers), **case, **kw
    )  # fmt: skip


def _epochs(mode: str, case: dict[str, Any], epochs: int = 1, **kw: Any) -> tuple[list[list[list[int]]], Any]:
    """Each epoch's batches, and the loader's ``stats()["over_budget"]``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BatchCostWarning)
        with _case_loader(mode, case, **kw) as loader:
            out = [list(loader) for _ in range(epochs)]
            return out, loader.stats()["over_budget"]


@settings(max_examples=15, deadline=None)
@given(case=cases, persistent=st.booleans())
def test_worker_processes_cut_exactly_the_batches_of_worker_threads(case: dict[str, Any], persistent: bool) -> None:
    """Differential: the same settings in processes and in threads give the same batches, two
    epochs (persistent workers too), and the same over-budget records."""
    threads, over_in_threads = _epochs("threads", case, 2, persistent_workers=persistent)
    processes, over_in_processes = _epochs("processes", case, 2, persistent_workers=persistent)
    assert processes == threads
    assert over_in_processes["count"] == over_in_threads["count"]
    assert sorted(over_in_processes["samples"], key=str) == sorted(over_in_threads["samples"], key=str)
    if not case["drop_last"]:
        assert sorted(i for b in processes[0] for i in b) == list(range(len(case["costs"]))), "every sample once"


def test_out_of_order_the_processes_give_the_same_batches_and_persist_across_epochs() -> None:
    """``in_order=False``: each batch as it comes, the same batches as in order; the worker
    processes are the same in the next epoch (the settings, ``sample_cost`` too, are kept)."""
    case = {"costs": [(5 * i) % 17 for i in range(60)], "max_batch_cost": 25, "batch_size": 4, "cost_mode": "sum"}
    case |= {"group_window": 5, "drop_last": False, "workers": 4, "stateful": False}
    (ordered,), _ = _epochs("threads", case)
    with _case_loader("processes", case, in_order=False) as loader:
        first = list(loader)
        pids = sorted(p.pid for p in loader_children())
        second = list(loader)
        assert sorted(p.pid for p in loader_children()) == pids and len(pids) == 2
    assert sorted(first) == sorted(second) == sorted(ordered)


def _resumed(mode: str, case: dict[str, Any], cuts: list[int], full: int, **kw: Any) -> list[list[int]]:
    """The batches of an epoch stopped after ``cuts[0]`` batches, resumed from its state and
    stopped after ``cuts[1]`` more (a state of a resumed epoch), ..., then resumed to its end."""
    got: list[list[int]] = []
    state: dict[str, Any] | None = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BatchCostWarning)
        for cut in cuts:
            with _case_loader(mode, case, **kw) as part:
                if state is not None:
                    part.load_state_dict(state)
                it = iter(part)
                got += [batch for _, batch in zip(range(min(cut, full - len(got) - 1)), it, strict=False)]
                state = through_torch_save(part.state_dict())
                it.close()
        with _case_loader(mode, case, **kw) as resumed:
            assert state is not None
            resumed.load_state_dict(state)
            return got + list(resumed)


@settings(max_examples=10, deadline=None)
@given(case=cases, cuts=st.lists(st.integers(0, 10), min_size=1, max_size=2), persistent=st.booleans())
def test_a_resumed_epoch_in_worker_processes_yields_exactly_the_rest(
    case: dict[str, Any], cuts: list[int], persistent: bool
) -> None:
    """Stopped at a cut and resumed, once or twice in a row, an epoch in worker processes gives
    the whole epoch's batches, which are the worker threads' batches."""
    (full,), _ = _epochs("threads", case)
    assert _resumed("processes", case, cuts, len(full), persistent_workers=persistent) == full


@pytest.mark.parametrize("cut", [1, 3, 6])
def test_a_resume_at_each_cut_twice_in_a_row_is_exact(cut: int) -> None:
    costs = [(7 * i) % 23 for i in range(80)]
    case = {"costs": costs, "max_batch_cost": 30, "batch_size": 5, "cost_mode": "sum", "group_window": 6}
    case |= {"drop_last": False, "workers": 4, "stateful": False}
    (full,), _ = _epochs("threads", case)
    assert len(full) > 3 * cut
    assert _resumed("processes", case, [cut, cut], len(full)) == full


@pytest.mark.parametrize("stateful", [False, True])
def test_persistent_workers_resume_a_second_epoch_exactly(stateful: bool) -> None:
    """Persistent workers: after a whole epoch, the second stopped mid-way and its state loaded
    into a new loader give the second epoch's batches, as with worker threads."""
    case = {"costs": [(7 * i) % 19 for i in range(70)], "max_batch_cost": 28, "batch_size": 5, "cost_mode": "padded"}
    case |= {"group_window": 4, "drop_last": True, "workers": 4, "stateful": stateful}

    def second_epoch(mode: str) -> tuple[list[list[int]], list[list[int]]]:
        """The second epoch whole, and stopped after 4 batches then resumed."""
        with _case_loader(mode, case, persistent_workers=True) as loader:
            list(loader)
            whole = list(loader)
        with _case_loader(mode, case, persistent_workers=True) as loader:
            list(loader)
            it = iter(loader)
            got = [next(it) for _ in range(4)]
            state = through_torch_save(loader.state_dict())
            it.close()
        with _case_loader(mode, case, persistent_workers=True) as resumed:
            resumed.load_state_dict(state)
            return got + list(resumed), whole

    in_threads, whole = second_epoch("threads")
    in_processes, whole_in_processes = second_epoch("processes")
    assert in_processes == in_threads == whole == whole_in_processes


def test_samples_over_the_budget_in_a_process_are_recorded_and_warned_in_the_loaders_process() -> None:
    """A sample over the budget alone, cut in a worker process, is a batch of one; its record
    (indexed ``(worker, sample number in its stream)``, the worker numbered among all) reaches
    ``stats()["over_budget"]`` with the epoch, and the warning is the loader's, once per epoch."""
    costs = [2, 2, 50, 2, 2, 70, 1, 2, 90]
    dataset = CostedShards(costs)
    with ThreadLoader(
        dataset, batch_size=8, max_batch_cost=10, sample_cost=dataset.cost, collate_fn=list, num_workers=1,
        worker_processes=2,
    ) as loader:  # fmt: skip
        for _ in range(2):  # epochs 1 and 2
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                batches = list(loader)
            warned = [w for w in caught if issubclass(w.category, BatchCostWarning)]
            assert len(warned) == 1, [str(w.message) for w in caught]
            assert "of worker" in str(warned[0].message) and "over max_batch_cost=10" in str(warned[0].message)
            assert [2] in batches and [5] in batches and [8] in batches
            assert sorted(i for b in batches for i in b) == list(range(9))
        over = loader.stats()["over_budget"]
    # worker w of 2 reads samples w, w + 2, ...: sample s is number s // 2 of worker s % 2
    expected = [{"index": (s % 2, s // 2), "cost": costs[s], "epoch": e} for e in (1, 2) for s in (2, 5, 8)]
    assert over["count"] == 6
    assert sorted(over["samples"], key=str) == sorted(expected, key=str)


def test_a_warning_made_an_error_loses_no_batch_and_no_record() -> None:
    costs = [1, 1, 50, 1, 1, 1, 60, 1]
    dataset = CostedShards(costs)
    with warnings.catch_warnings():
        warnings.simplefilter("error", BatchCostWarning)
        with ThreadLoader(
            dataset, batch_size=3, max_batch_cost=5, sample_cost=dataset.cost, collate_fn=list, worker_processes=2
        ) as loader:  # fmt: skip
            it, out, raised = iter(loader), [], 0
            while True:
                try:
                    out.append(next(it))
                except BatchCostWarning:
                    raised += 1
                except StopIteration:
                    break
            over = loader.stats()["over_budget"]
    assert raised == 1, "the epoch's one warning, raised by a next()"
    assert sorted(i for b in out for i in b) == list(range(8)) and [2] in out and [6] in out
    assert over["count"] == 2


@pytest.mark.parametrize("mode", ["threads", "processes"])
def test_an_error_is_raised_at_its_sample_named_and_a_state_after_it_resumes(mode: str) -> None:
    def costed() -> ThreadLoader[Any]:
        dataset = CostedShards([1] * 16, fail_at=5)
        kw = workers_in(mode, 2)
        return ThreadLoader(dataset, batch_size=3, max_batch_cost=10, sample_cost=dataset.cost, collate_fn=list, **kw)

    with costed() as whole:
        it, again = iter(whole), []
        with pytest.raises(OSError, match="sample 5 is corrupt") as raised:
            while True:
                again.append(next(it))
        again += list(it)
    # sample 5 is number 2 of worker 1 (worker w reads w, w + 2, ...)
    assert "at sample #2 of worker 1's iterator" in "".join(getattr(raised.value, "__notes__", []))
    assert sorted(i for b in again for i in b) == [i for i in range(16) if i != 5]
    with costed() as part:
        it, out = iter(part), []
        with pytest.raises(OSError):
            while True:
                out.append(next(it))
        state = part.state_dict()
        it.close()
    with costed() as resumed:
        resumed.load_state_dict(state)
        out += list(resumed)
    assert out == again, "a resume after the error raises it no more and cuts as the whole epoch did"


def test_a_bad_cost_in_a_process_names_the_sample_and_the_epoch_goes_on() -> None:
    dataset = CostedShards([1] * 10)
    with ThreadLoader(
        dataset, batch_size=3, max_batch_cost=10, sample_cost=negative_at_4, collate_fn=list, worker_processes=1
    ) as loader:  # fmt: skip
        it, out = iter(loader), []
        with pytest.raises(ValueError, match="for sample #4 of worker 0's iterator it gave -1"):
            while True:
                out.append(next(it))
        out += list(it)
    assert out == [[0, 1, 2], [3, 5, 6], [7, 8, 9]]


def test_timeout_bounds_one_next_and_the_batch_keeps_its_place(tmp_path: Path) -> None:
    gate = FileGate(tmp_path)
    dataset = CostedShards([1] * 12, gate=(5, gate.release, gate.started))
    with ThreadLoader(
        dataset, batch_size=2, max_batch_cost=2, sample_cost=dataset.cost, collate_fn=list, worker_processes=2,
        timeout=0.3,
    ) as loader:  # fmt: skip
        it = iter(loader)
        # worker 1 reads 1, 3, 5, ...: its second batch (the epoch's batch 3) waits at the gate
        got = [next_past_timeouts(it, b) for b in range(3)]
        try:
            with pytest.raises(LoaderTimeoutError, match="waiting for batch 3"):
                next(it)
        finally:
            gate.open()
        while True:
            try:
                got.append(next(it))
            except LoaderTimeoutError:
                continue
            except StopIteration:
                break
    assert got == [[0, 2], [1, 3], [4, 6], [5, 7], [8, 10], [9, 11]]


@pytest.mark.parametrize("closer", ["epoch", "loader"])
def test_close_from_another_thread_wakes_a_waiting_next(closer: str, tmp_path: Path) -> None:
    gate = FileGate(tmp_path)
    dataset = CostedShards([1] * 12, gate=(5, gate.release, gate.started))
    with ThreadLoader(
        dataset, batch_size=2, max_batch_cost=2, sample_cost=dataset.cost, collate_fn=list, worker_processes=2
    ) as loader:  # fmt: skip
        it = iter(loader)
        assert [next(it) for _ in range(3)] == [[0, 2], [1, 3], [4, 6]]
        close = (it if closer == "epoch" else loader).close
        assert WaitingConsumer().next_raises_closed(it, gate, close), "next() was not seen waiting before the close"
        with pytest.raises(StopIteration):
            next(it)
    assert wait_for_no_loader_threads() == []


def test_a_lost_process_is_an_error_naming_it_and_leaves_nothing_running() -> None:
    # Worker 0 of 2 (process 0) reads 0, 2, 4, 6, 8: it exits at sample 8, in its 2nd batch
    dataset = CostedShards([1] * 16, die_at=8)
    with ThreadLoader(
        dataset, batch_size=3, max_batch_cost=10, sample_cost=dataset.cost, collate_fn=list, worker_processes=2
    ) as loader:  # fmt: skip
        it = iter(loader)
        got: list[list[int]] = []
        with pytest.raises(WorkerProcessError, match=r"worker process 0 .* exited with code 3"):
            for batch in it:
                got.append(batch)
        # what was sent before the exit (the thread reads ahead of the sending) is handed out
        assert got == [[0, 2, 4], [1, 3, 5]][: len(got)]
        with pytest.raises(StopIteration):
            next(it)
        del it
        assert wait_for_no_loader_threads() == []
        loader.dataset.die_at = None  # the process started in its place is sent the dataset as it is now
        assert sorted(i for b in loader for i in b) == list(range(16))
    assert wait_for_no_loader_threads() == []


def test_a_sample_cost_that_cannot_be_pickled_is_named() -> None:
    dataset = CostedShards([1] * 8)
    loader = ThreadLoader(dataset, batch_size=2, max_batch_cost=4, sample_cost=lambda s: 1, worker_processes=1)
    with pytest.raises(TypeError, match=r"sample_cost \(.*lambda.*\) cannot be pickled"):
        iter(loader)
    loader.close()
