"""``max_batch_cost``: batches cut after loading by the samples' cost.

Against a pure-Python model of the cut (hypothesis: the same batches, every sample once, every
batch within its budget or a lone sample over it, ``batch_size`` kept) in every mode the loader
takes (no workers, worker threads, ``in_order=False``, async, worker processes); exact resume at any cut; two gloo
ranks of which one has only long samples (same number of batches, every sample once, no hang);
the refusals and bad costs, each named; the datapipes node on its own. An ``IterableDataset``:
each worker's stream cut as the model cuts it and the workers' batches taken in turn, torch's
samples in torch's order, exact resume (replayed, or from the dataset's own state), errors.
"""

from __future__ import annotations

import asyncio
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.utils.data import Dataset

import datapipes as dp
from tests.fixtures.datasets import RangeDataset
from tests.fixtures.scripts import run_ranks
from tests.fixtures.threads import wait_for_no_loader_threads
from tests.fixtures.values import through_torch_save
from torch_threadloader import ThreadLoader
from torch_threadloader.over_budget import BatchCostWarning


class Sized(Dataset[int]):
    """``dataset[i] == i``; sample ``i`` costs ``costs[i]`` (``sample_cost = dataset.cost``)."""

    def __init__(self, costs: list[int]) -> None:
        self.costs = costs

    def __len__(self) -> int:
        return len(self.costs)

    def __getitem__(self, i: int) -> int:
        return i

    def cost(self, sample: int) -> int:
        return self.costs[sample]


class AsyncSized(Sized):
    async def __getitem__(self, i: int) -> int:  # type: ignore[override]
        await asyncio.sleep(0)
        return i


#: The modes cost batching runs in: (dataset class, loader arguments).
MODES = [
    pytest.param(Sized, {"num_workers": 0}, id="no-workers"),
    pytest.param(Sized, {"num_workers": 2}, id="threads"),
    pytest.param(Sized, {"num_workers": 3, "item_concurrency": 2, "in_order": False}, id="threads-out-of-order"),
    pytest.param(AsyncSized, {"num_workers": 0, "item_concurrency": 3}, id="async"),
    pytest.param(AsyncSized, {"num_workers": 2, "item_concurrency": 2}, id="async-workers"),
    # worker processes (in the full tier: each starts processes; tests/processes/ has the rest)
    pytest.param(Sized, {"num_workers": 1, "worker_processes": 2}, id="processes", marks=pytest.mark.slow),
    pytest.param(
        AsyncSized,
        {"num_workers": 2, "worker_processes": 1, "in_order": False},
        id="async-processes",
        marks=pytest.mark.slow,
    ),
]


def model(
    costs: list[int], order: list[int], max_cost: int, batch_size: int, mode: str, window: int | None
) -> list[list[int]]:
    """The cut, written plainly: ``order`` (the epoch's samples) sorted by cost within each
    window of positions (stable), then each batch the longest run from the next sample on
    that fits ``max_cost`` and ``batch_size`` (at least one sample)."""
    if window:
        chunks = [order[i : i + window] for i in range(0, len(order), window)]
        order = [i for chunk in chunks for i in sorted(chunk, key=lambda s: costs[s])]
    batches: list[list[int]] = []
    start = 0
    while start < len(order):
        size = 1
        while start + size < len(order) and size < batch_size:
            group = [costs[i] for i in order[start : start + size + 1]]
            cost = sum(group) if mode == "sum" else len(group) * max(group)
            if cost > max_cost:
                break
            size += 1
        batches.append(order[start : start + size])
        start += size
    return batches


def _cost(batch: list[int], costs: list[int], mode: str) -> int:
    group = [costs[i] for i in batch]
    return sum(group) if mode == "sum" else len(group) * max(group)


def _costed_loader(make: Any, costs: list[int], **kw: Any) -> ThreadLoader[Any]:
    dataset = make(costs)
    kw.setdefault("collate_fn", list)
    return ThreadLoader(dataset, sample_cost=dataset.cost, **kw)


cut_settings = st.fixed_dictionaries(
    {
        "costs": st.lists(st.integers(0, 40), min_size=0, max_size=60),
        "max_batch_cost": st.integers(1, 60),
        "batch_size": st.integers(1, 9),
        "cost_mode": st.sampled_from(["sum", "padded"]),
        "group_window": st.one_of(st.none(), st.integers(1, 20)),
    }
)


# -- the cut against the model ------------------------------------------------------------------
@pytest.mark.parametrize("make,kw", MODES)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=cut_settings)
def test_the_batches_are_the_models_every_sample_once_within_budget(make: Any, kw: dict[str, Any], case: Any) -> None:
    costs = case.pop("costs")
    n, budget, size, mode = len(costs), case["max_batch_cost"], case["batch_size"], case["cost_mode"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BatchCostWarning)
        with _costed_loader(make, costs, **case, **kw) as loader:
            batches = list(loader)
    assert batches == model(costs, list(range(n)), budget, size, mode, case["group_window"])
    assert sorted(i for b in batches for i in b) == list(range(n))
    for batch in batches:
        assert 1 <= len(batch) <= size
        assert _cost(batch, costs, mode) <= budget or (len(batch) == 1 and costs[batch[0]] > budget)


@pytest.mark.parametrize("make,kw", MODES[:2] + MODES[3:4])
def test_shuffled_order_is_torchs_draw_and_drop_last_leaves_out_torchs_samples(make: Any, kw: dict[str, Any]) -> None:
    costs = [(7 * i) % 23 for i in range(50)]
    order = [
        int(i)
        for b in torch.utils.data.DataLoader(
            range(50), batch_size=8, shuffle=True, drop_last=True, generator=torch.Generator().manual_seed(5)
        )
        for i in b
    ]
    g = torch.Generator().manual_seed(5)
    with _costed_loader(
        make, costs, batch_size=8, shuffle=True, drop_last=True, generator=g, max_batch_cost=40, **kw
    ) as loader:
        batches = list(loader)
    assert len(order) == 48
    assert batches == model(costs, order, 40, 8, "sum", None)


# -- resume ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("make,kw", MODES)
@settings(max_examples=12, deadline=None)
@given(case=cut_settings, cut=st.integers(0, 30), data=st.data())
def test_a_resumed_epoch_yields_exactly_the_rest(make: Any, kw: dict[str, Any], case: Any, cut: int, data: Any) -> None:
    costs = case.pop("costs") or [1]  # torch's RandomSampler refuses an empty dataset
    resume_kw = data.draw(st.sampled_from([kw, {"num_workers": 1}, {"num_workers": 0}]), label="resume with")
    if make is AsyncSized:
        resume_kw = {**resume_kw, "item_concurrency": 2}
    g = torch.Generator().manual_seed(11)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BatchCostWarning)
        with _costed_loader(make, costs, shuffle=True, generator=g, **case, **kw) as loader:
            full = list(loader)
        g.manual_seed(11)
        with _costed_loader(make, costs, shuffle=True, generator=g, **case, **kw) as loader:
            it = iter(loader)
            got = [next(it) for _ in range(min(cut, len(full) - 1))]  # a state after the last batch is a finished epoch
            state = through_torch_save(loader.state_dict())
            it.close()
        with _costed_loader(make, costs, shuffle=True, generator=torch.Generator(), **case, **resume_kw) as resumed:
            resumed.load_state_dict(state)
            rest = list(resumed)
            assert got + rest == full
            assert list(resumed) != [] or not costs  # the next epoch is a whole one


def test_a_state_from_another_budget_is_refused_naming_it() -> None:
    costs = [3] * 20
    with _costed_loader(Sized, costs, batch_size=4, max_batch_cost=10) as loader:
        it = iter(loader)
        next(it)
        state = loader.state_dict()
        it.close()
    with _costed_loader(Sized, costs, batch_size=4, max_batch_cost=12) as other:
        with pytest.raises(ValueError, match="max_batch_cost=10 there, 12 here"):
            other.load_state_dict(state)
    plain = ThreadLoader(Sized(costs), batch_size=4, collate_fn=list)
    with pytest.raises(ValueError, match="max_batch_cost"):
        plain.load_state_dict(state)


class LoadCounted(Sized):
    """Counts the samples loaded (``__getitem__`` calls) in a list the workers' shallow copies
    share, under a lock."""

    def __init__(self, costs: list[int]) -> None:
        super().__init__(costs)
        self.lock = threading.Lock()
        self.loaded = [0]

    def __getitem__(self, i: int) -> int:
        with self.lock:
            self.loaded[0] += 1
        return i


class Logged(Sized):
    """Appends each index it loads to a file (the children of worker processes load it)."""

    def __init__(self, costs: list[int], log: Path) -> None:
        super().__init__(costs)
        self.log = log

    def __getitem__(self, i: int) -> int:
        with self.log.open("a") as f:
            f.write(f"{i}\n")
        return i


def test_worker_processes_load_ahead_as_many_samples_as_worker_threads_would(tmp_path: Path) -> None:
    """A child's units are samples: it loads ahead ``num_workers x prefetch_factor x batch_size``
    of them (as threads do), not that many divided by ``batch_size``."""
    log = tmp_path / "loaded"
    log.touch()
    dataset = Logged([1] * 64, log)
    with ThreadLoader(
        dataset, batch_size=8, num_workers=1, worker_processes=1, prefetch_factor=2, collate_fn=list,
        max_batch_cost=100, sample_cost=dataset.cost,
    ) as loader:  # fmt: skip
        it = iter(loader)
        assert next(it) == list(range(8))
        ahead = 1 * 2 * 8
        for _ in range(600):  # the child fills its prefetch while this thread waits (bounded)
            if len(log.read_text().split()) >= 8 + ahead:
                break
            time.sleep(0.05)
        assert len(log.read_text().split()) >= 8 + ahead
        assert list(it)[-1] == list(range(56, 64))


@pytest.mark.parametrize("window", [None, 10, 1000])
def test_the_samples_held_are_bounded_by_the_window_and_the_prefetch(window: int | None) -> None:
    """At most the prefetch (straggler mode's ``capacity``: workers x prefetch_factor x
    batch_size), the window being sorted and the sorted samples not yet cut are loaded and not
    yet delivered, however far the loader runs ahead."""
    costs = [1 + (i * 13) % 9 for i in range(400)]
    dataset = LoadCounted(costs)
    held = 2 * 2 * 4  # num_workers x prefetch_factor x batch_size
    bound = held + min(window or 0, len(costs)) + 4 + 1
    with ThreadLoader(
        dataset, batch_size=4, num_workers=2, collate_fn=list, max_batch_cost=12, sample_cost=dataset.cost,
        group_window=window,
    ) as loader:  # fmt: skip
        delivered, most = 0, 0
        for batch in loader:
            delivered += len(batch)
            time.sleep(0.001)  # the workers run ahead as far as they may
            with dataset.lock:
                most = max(most, dataset.loaded[0] - delivered)
    assert delivered == len(costs)
    assert 0 < most <= bound


# -- over the budget, errors, refusals ------------------------------------------------------------
@pytest.mark.parametrize("make,kw", MODES)
def test_a_warning_made_an_error_loses_no_sample(make: Any, kw: dict[str, Any]) -> None:
    """``-W error``: the over-budget warning is raised by next(), and the next next() hands out
    that sample, recorded once."""
    costs = [2, 50, 2]
    with _costed_loader(make, costs, batch_size=8, max_batch_cost=10, **kw) as loader, warnings.catch_warnings():
        warnings.simplefilter("error", BatchCostWarning)
        it = iter(loader)
        assert next(it) == [0]
        with pytest.raises(BatchCostWarning):
            next(it)
        assert list(it) == [[1], [2]]
        assert loader.stats()["over_budget"]["count"] == 1


@pytest.mark.parametrize("make,kw", MODES)
def test_a_sample_over_the_budget_is_a_batch_of_one_recorded_never_dropped(make: Any, kw: dict[str, Any]) -> None:
    costs = [2, 2, 50, 2, 2, 70, 1]
    with _costed_loader(make, costs, batch_size=8, max_batch_cost=10, **kw) as loader:
        with pytest.warns(BatchCostWarning, match="index 2 costs 50, over max_batch_cost=10"):
            batches = list(loader)
        assert batches == [[0, 1], [2], [3, 4], [5], [6]]
        over = loader.stats()["over_budget"]
    assert over == {
        "count": 2,
        "samples": [{"index": 2, "cost": 50, "epoch": 1}, {"index": 5, "cost": 70, "epoch": 1}],
    }


@pytest.mark.parametrize("make,kw", MODES)
@pytest.mark.parametrize(
    "bad,error,match",
    [
        (-1, ValueError, "non-negative int; for the sample at index 4 it gave -1"),
        (2.5, TypeError, r"for the sample at index 4 it gave 2.5 \(float\)"),
        (True, TypeError, "for the sample at index 4 it gave True"),
    ],
)
def test_a_bad_cost_is_raised_naming_the_sample_and_the_epoch_goes_on(
    make: Any, kw: dict[str, Any], bad: object, error: type[Exception], match: str
) -> None:
    dataset = make([1] * 10)

    def cost(sample: int) -> Any:
        return bad if sample == 4 else 1

    with ThreadLoader(dataset, batch_size=3, max_batch_cost=10, sample_cost=cost, collate_fn=list, **kw) as loader:
        it, out = iter(loader), []
        with pytest.raises(error, match=match):
            while True:
                out.append(next(it))
        out += list(it)
    assert out == [[0, 1, 2], [3, 5, 6], [7, 8, 9]]  # only the sample whose cost failed is missing


class CostsFailAt4(Sized):
    """``Sized`` whose sample 4 raises (the costs come from the list, as in ``Sized``)."""

    def __getitem__(self, i: int) -> int:
        if i == 4:
            raise OSError("sample 4 is corrupt")
        return i


class AsyncCostsFailAt4(Sized):
    """``CostsFailAt4`` with an async ``__getitem__``."""

    async def __getitem__(self, i: int) -> int:  # type: ignore[override]
        if i == 4:
            raise OSError("sample 4 is corrupt")
        return i


@pytest.mark.parametrize(
    "make,kw", [(CostsFailAt4 if m.values[0] is Sized else AsyncCostsFailAt4, m.values[1]) for m in MODES]
)
def test_a_dataset_error_is_raised_at_its_sample_and_a_state_after_it_resumes(make: Any, kw: dict[str, Any]) -> None:
    with _costed_loader(make, [1] * 10, batch_size=3, max_batch_cost=10, **kw) as loader:
        it, out = iter(loader), []
        with pytest.raises(OSError, match="sample 4 is corrupt"):
            while True:
                out.append(next(it))
        state = loader.state_dict()
        it.close()
    with _costed_loader(make, [1] * 10, batch_size=3, max_batch_cost=10, **kw) as resumed:
        resumed.load_state_dict(state)
        out += list(resumed)
    assert out == [[0, 1, 2], [3, 5, 6], [7, 8, 9]]


def test_a_numpy_or_tensor_int_is_a_cost() -> None:
    np = pytest.importorskip("numpy")
    costs: list[Any] = [np.int64(3), torch.tensor(4), 3, np.int32(5)]
    with ThreadLoader(
        Sized([0] * 4), batch_size=4, max_batch_cost=7, sample_cost=costs.__getitem__, collate_fn=list
    ) as loader:
        assert list(loader) == [[0, 1], [2], [3]]


@pytest.mark.parametrize(
    "kw,error,match",
    [
        ({"sample_cost": len}, ValueError, "sample_cost needs max_batch_cost"),
        ({"group_window": 8}, ValueError, "group_window needs max_batch_cost"),
        ({"cost_mode": "padded"}, ValueError, "cost_mode needs max_batch_cost"),
        ({"max_batch_cost": 10}, ValueError, "max_batch_cost needs sample_cost"),
        ({"max_batch_cost": 0, "sample_cost": len}, ValueError, "max_batch_cost must be a positive int"),
        ({"max_batch_cost": 1.5, "sample_cost": len}, TypeError, "max_batch_cost must be a positive int"),
        ({"max_batch_cost": True, "sample_cost": len}, TypeError, "max_batch_cost must be a positive int"),
        ({"max_batch_cost": 9, "sample_cost": 3}, TypeError, "sample_cost must be a callable"),
        ({"max_batch_cost": 9, "sample_cost": len, "cost_mode": "max"}, ValueError, "cost_mode must be one of"),
        ({"max_batch_cost": 9, "sample_cost": len, "group_window": 0}, ValueError, "group_window must be a positive"),
        ({"max_batch_cost": 9, "sample_cost": len, "cost_sync": "yes"}, TypeError, "cost_sync must be None"),
        ({"max_batch_cost": 9, "sample_cost": len, "batch_size": None}, ValueError, "batch_sampler"),
        ({"max_batch_cost": 9, "sample_cost": len, "num_workers": 2, "defer_stragglers": True}, ValueError, "defer"),
        ({"max_batch_cost": 9, "sample_cost": len, "on_error": "skip"}, ValueError, "on_error='skip'"),
        ({"max_batch_cost": 9, "sample_cost": len, "item_concurrency": 2}, ValueError, "item_concurrency=2 with num_"),
        ({"max_batch_cost": 9, "sample_cost": len, "max_bytes_in_flight": 1 << 20}, ValueError, "max_bytes_in"),
    ],
)
def test_bad_arguments_are_refused_naming_them(kw: dict[str, Any], error: type[Exception], match: str) -> None:
    kw.setdefault("batch_size", 4)
    with pytest.raises(error, match=match):
        ThreadLoader(RangeDataset(10), **kw)


def test_a_datapipes_graph_is_refused_naming_the_combination() -> None:
    with pytest.raises(ValueError, match="max_batch_cost does not apply to a datapipes graph as the dataset"):
        ThreadLoader(dp.Sampler(sampler=range(10)), batch_size=4, max_batch_cost=9, sample_cost=len)


def test_len_is_unknown_and_a_setting_changed_later_is_checked() -> None:
    with _costed_loader(Sized, [1] * 10, batch_size=4, max_batch_cost=3) as loader:
        with pytest.raises(TypeError, match="max_batch_cost"):
            len(loader)
        with pytest.raises(TypeError, match="max_batch_cost"):
            len(iter(loader))
        with pytest.raises(ValueError, match="group_window must be a positive"):
            loader.group_window = -2
        loader.max_batch_cost = 2
        assert list(loader) == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]


# -- ranks ----------------------------------------------------------------------------------------
def test_two_gloo_ranks_one_with_only_long_samples_step_together(tmp_path: Path) -> None:
    from tests.ddp_cost import BUDGET, SAMPLES, cost_of

    results = run_ranks("tests.ddp_cost", tmp_path, timeout=180)
    steps = [len(r["full"]) for r in results]
    assert steps[0] == steps[1], "both ranks cut as many batches: no collective waits"
    seen = sorted(i for r in results for b in r["full"] for i in b)
    assert seen == list(range(SAMPLES)), "every sample of the epoch once across the ranks"
    for r in results:
        for batch in r["full"]:
            assert sum(cost_of(i) for i in batch) <= BUDGET or len(batch) == 1
        assert r["resumed"] == r["full"], "a mid-epoch resume gives the same batches on each rank"
    # Without agreeing, the ranks would cut different numbers of batches (the test can tell).
    assert results[0]["unsynced"] != results[1]["unsynced"]


@pytest.mark.parametrize("where", ["threads", pytest.param("processes", marks=pytest.mark.slow)])
def test_two_gloo_ranks_streaming_an_iterable_step_together_with_cost_sync(tmp_path: Path, where: str) -> None:
    """Rank 0's stream cuts into 4 batches, rank 1's (all long) into 60: with ``cost_sync=True``
    both take 4 steps and end together, rank 1 warning what it left out; a resume after 2
    steps gives the same batches; unsynced, the ranks' counts differ (a hang under DDP). The
    same with the streams cut in worker processes (the ranks agree in the loader's process)."""
    from tests.ddp_cost import BUDGET, cost_of

    args = ["--processes"] if where == "processes" else []
    results = run_ranks("tests.ddp_cost", tmp_path, timeout=180, args=args)
    steps = [len(r["stream_full"]) for r in results]
    assert steps == [4, 4]
    assert [r["stream_warned"] for r in results] == [0, 2], "rank 1 warns, in the whole and the resumed epoch"
    for rank, r in enumerate(results):
        mine = list(range(rank, 120, 2))
        flat = [i for b in r["stream_full"] for i in b]
        assert set(flat) <= set(mine) and len(flat) == len(set(flat))
        assert all(sum(cost_of(i) for i in b) <= BUDGET or len(b) == 1 for b in r["stream_full"])
        assert r["stream_resumed"] == r["stream_full"], "a resume after 2 steps gives the same batches"
    assert results[0]["stream_unsynced"] == 4 and results[1]["stream_unsynced"] == 60


def test_cost_sync_needs_a_process_group() -> None:
    with _costed_loader(Sized, [1] * 8, batch_size=4, max_batch_cost=3, cost_sync=True) as loader:
        with pytest.raises(RuntimeError, match=r"cost_sync=True needs torch\.distributed's default process group"):
            iter(loader)
        loader.cost_sync = None  # automatic: no process group, no agreement
        assert list(loader) == [[0, 1, 2], [3, 4, 5], [6, 7]]
    stream = Streamed([1] * 8)
    with ThreadLoader(stream, batch_size=4, max_batch_cost=3, sample_cost=stream.cost, cost_sync=True) as loader:
        with pytest.raises(RuntimeError, match=r"cost_sync=True needs torch\.distributed's default process group"):
            iter(loader)


# -- the node -------------------------------------------------------------------------------------
def test_the_node_resumes_from_its_own_state_with_the_items_it_holds() -> None:
    costs = [5, 1, 4, 4, 2, 9, 3, 3, 1, 6, 2, 2]
    node = dp.CostBatcher(dp.Sampler(sampler=costs), 8, int, batch_size=3, group_window=5)
    full = list(node)
    it = iter(node)
    got = [next(it) for _ in range(2)]
    state = it.state_dict()
    it.close()
    node.load_state_dict(state)
    assert got + list(node) == full
    assert sorted(i for b in full for i in b) == sorted(costs)


def test_the_node_refuses_streams_of_different_lengths() -> None:
    node = dp.CostBatcher(range(4), 10, int, agree=lambda size: 0)
    with pytest.raises(RuntimeError, match="must have as many items"):
        next(iter(node))
    assert dp.batch_cost([2, 5, 1], "padded") == 15 and dp.batch_cost([2, 5, 1], "sum") == 8


# -- an IterableDataset: each worker cuts its own stream ------------------------------------------
class Streamed(torch.utils.data.IterableDataset[int]):
    """Worker ``w`` of ``k`` yields samples ``w, w + k, ...`` of ``costs`` (sample ``s`` costs
    ``costs[s]``); ``fail_at``: that sample raises in the iterator, which goes on after it."""

    def __init__(self, costs: list[int], fail_at: int | None = None) -> None:
        self.costs = costs
        self.fail_at = fail_at
        self.lock = threading.Lock()
        self.read = [0]  # samples read by every copy (the copies share the list)

    def mine(self) -> list[int]:
        info = torch.utils.data.get_worker_info()
        w, k = (0, 1) if info is None else (info.id, info.num_workers)
        return list(range(w, len(self.costs), k))

    def __iter__(self) -> Any:
        return _Samples(self, self.mine(), 0)

    def cost(self, sample: int) -> int:
        return self.costs[sample]


class _Samples:
    """An iterator that goes on after a sample's error (a generator would end there)."""

    def __init__(self, dataset: Streamed, samples: list[int], start: int) -> None:
        self.dataset, self.samples, self.at = dataset, samples, start

    def __iter__(self) -> _Samples:
        return self

    def __next__(self) -> int:
        if self.at >= len(self.samples):
            if isinstance(self.dataset, StatefulStreamed):
                self.dataset.at = 0  # the next epoch starts over
            raise StopIteration
        sample = self.samples[self.at]
        self.at += 1
        if isinstance(self.dataset, StatefulStreamed):
            self.dataset.at = self.at
        with self.dataset.lock:
            self.dataset.read[0] += 1
        if sample == self.dataset.fail_at:
            raise OSError(f"sample {sample} is corrupt")
        return sample


class StatefulStreamed(Streamed):
    """``Streamed`` with its own state: where its copy's iterator is (a resume loads it, and
    reads nothing again before it)."""

    def __init__(self, costs: list[int], fail_at: int | None = None) -> None:
        super().__init__(costs, fail_at)
        self.at = 0

    def __iter__(self) -> Any:
        return _Samples(self, self.mine(), self.at)

    def state_dict(self) -> dict[str, int]:
        return {"at": self.at}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.at = state["at"]


def in_turn(streams: list[list[list[int]]]) -> list[list[int]]:
    """The workers' batches taken in turn, a worker that ran out leaving the turn (torch's order)."""
    out: list[list[int]] = []
    queues = [list(s) for s in streams]
    while any(queues):
        for q in queues:
            if q:
                out.append(q.pop(0))
    return out


def iterable_model(costs: list[int], workers: int, case: dict[str, Any], drop_last: bool) -> list[list[int]]:
    size = case["batch_size"]
    streams = []
    for w in range(max(workers, 1)):
        mine = list(range(w, len(costs), max(workers, 1)))
        if drop_last:
            mine = mine[: len(mine) - len(mine) % size]
        streams.append(model(costs, mine, case["max_batch_cost"], size, case["cost_mode"], case["group_window"]))
    return in_turn(streams)


ITERABLE_MODES = [
    pytest.param(Streamed, {"num_workers": 0}, id="no-workers"),
    pytest.param(Streamed, {"num_workers": 2}, id="threads"),
    pytest.param(StatefulStreamed, {"num_workers": 0}, id="own-state"),
    pytest.param(StatefulStreamed, {"num_workers": 3, "prefetch_factor": 1}, id="own-state-threads"),
    pytest.param(StatefulStreamed, {"num_workers": 2, "persistent_workers": True}, id="own-state-persistent"),
]


@pytest.mark.parametrize("make,kw", ITERABLE_MODES)
@settings(max_examples=20, deadline=None)
@given(case=cut_settings, drop_last=st.booleans())
def test_an_iterable_datasets_workers_each_cut_their_stream_as_the_model(
    make: Any, kw: dict[str, Any], case: Any, drop_last: bool
) -> None:
    costs = case.pop("costs")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BatchCostWarning)
        with _costed_loader(make, costs, drop_last=drop_last, **case, **kw) as loader:
            batches = list(loader)
    assert batches == iterable_model(costs, kw["num_workers"], case, drop_last)
    for batch in batches:
        assert 1 <= len(batch) <= case["batch_size"]
        over = len(batch) == 1 and costs[batch[0]] > case["max_batch_cost"]
        assert _cost(batch, costs, case["cost_mode"]) <= case["max_batch_cost"] or over


@pytest.mark.parametrize("drop_last", [False, True])
def test_an_iterable_gives_torchs_samples_in_torchs_order(drop_last: bool) -> None:
    """torch is the oracle: flattened, the batches are torch's samples, in torch's order
    (``batch_size=None``; with ``drop_last``, those of its batches of ``batch_size``)."""
    costs = [(7 * i) % 23 for i in range(53)]
    dataset = Streamed(costs)
    if drop_last:
        torchs = [int(i) for b in torch.utils.data.DataLoader(dataset, batch_size=4, drop_last=True) for i in b]
    else:
        torchs = [int(i) for i in torch.utils.data.DataLoader(dataset, batch_size=None)]
    with ThreadLoader(
        dataset, batch_size=4, drop_last=drop_last, max_batch_cost=30, sample_cost=dataset.cost, collate_fn=list,
        group_window=None,
    ) as loader:  # fmt: skip
        batches = list(loader)
    assert [i for b in batches for i in b] == torchs
    assert len(batches) < len(torchs) / 2 + 1, "the cut took more than one sample a batch"


@pytest.mark.parametrize("make,kw", ITERABLE_MODES)
@settings(max_examples=12, deadline=None)
@given(case=cut_settings, drop_last=st.booleans(), cuts=st.lists(st.integers(0, 12), min_size=1, max_size=2))
def test_a_resumed_iterable_epoch_yields_exactly_the_rest(
    make: Any, kw: dict[str, Any], case: Any, drop_last: bool, cuts: list[int]
) -> None:
    """Stopped after some batches and resumed, once or twice (a state taken from a resumed
    epoch), the batches are the whole epoch's."""
    costs = case.pop("costs")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BatchCostWarning)
        with _costed_loader(make, costs, drop_last=drop_last, **case, **kw) as loader:
            full = list(loader)
        got: list[list[int]] = []
        state: dict[str, Any] | None = None
        for cut in cuts:
            with _costed_loader(make, costs, drop_last=drop_last, **case, **kw) as part:
                if state is not None:
                    part.load_state_dict(state)
                it = iter(part)
                got += [batch for _, batch in zip(range(min(cut, len(full) - len(got) - 1)), it, strict=False)]
                state = through_torch_save(part.state_dict())
                it.close()
        with _costed_loader(make, costs, drop_last=drop_last, **case, **kw) as resumed:
            assert state is not None
            resumed.load_state_dict(state)
            rest = list(resumed)
    assert got + rest == full


def test_a_dataset_with_its_own_state_is_not_read_again_on_resume() -> None:
    """A replay point holds the copy's own state at its window's start: only that window is read again."""
    costs = [1 + i % 5 for i in range(60)]
    dataset = StatefulStreamed(costs)
    kw: dict[str, Any] = {"batch_size": 4, "max_batch_cost": 12, "group_window": 6, "collate_fn": list}
    with ThreadLoader(dataset, sample_cost=dataset.cost, **kw) as loader:
        full = list(loader)
        it = iter(loader)
        got = [next(it) for _ in range(8)]
        state = loader.state_dict()
        it.close()
    resumed_ds = StatefulStreamed(costs)
    with ThreadLoader(resumed_ds, sample_cost=resumed_ds.cost, **kw) as resumed:
        resumed.load_state_dict(state)
        rest = list(resumed)
    assert got + rest == full
    delivered = sum(len(b) for b in got)
    assert resumed_ds.read[0] <= len(costs) - delivered + 6  # the rest, and at most a window again


@pytest.mark.parametrize("make,kw", ITERABLE_MODES)
def test_an_iterable_sample_over_the_budget_is_a_batch_of_one_recorded(make: Any, kw: dict[str, Any]) -> None:
    costs = [2, 2, 50, 2, 2, 70, 1]
    workers = max(kw["num_workers"], 1)
    with _costed_loader(make, costs, batch_size=8, max_batch_cost=10, **kw) as loader:
        with pytest.warns(BatchCostWarning, match=r"of worker \d's iterator costs \d+, over max_batch_cost=10"):
            batches = list(loader)
        over = loader.stats()["over_budget"]
    assert [2] in batches and [5] in batches
    assert sorted(i for b in batches for i in b) == list(range(7))
    expected = [{"index": (s % workers, s // workers), "cost": costs[s], "epoch": 1} for s in (2, 5)]
    assert over["count"] == 2
    assert sorted(over["samples"], key=str) == sorted(expected, key=str)


@pytest.mark.parametrize("make,kw", ITERABLE_MODES)
def test_an_iterable_error_is_raised_at_its_sample_and_a_state_after_it_resumes(make: Any, kw: dict[str, Any]) -> None:
    def costed(**more: Any) -> ThreadLoader[Any]:
        dataset = make([1] * 12, fail_at=4)
        return ThreadLoader(dataset, batch_size=3, max_batch_cost=10, sample_cost=dataset.cost, collate_fn=list, **kw)

    with costed() as loader:
        it, out = iter(loader), []
        with pytest.raises(OSError, match="sample 4 is corrupt") as raised:
            while True:
                out.append(next(it))
        state = loader.state_dict()
        it.close()
    assert "of worker" in "".join(getattr(raised.value, "__notes__", []))
    with costed() as resumed:
        resumed.load_state_dict(state)
        out += list(resumed)
    assert sorted(i for b in out for i in b) == [i for i in range(12) if i != 4]  # only the failed one is missing
    with costed() as whole:
        it, again = iter(whole), []
        with pytest.raises(OSError):
            while True:
                again.append(next(it))
        again += list(it)
    assert out == again, "a resume after the error raises it no more and cuts as the whole epoch did"


def test_an_iterable_bad_cost_names_the_sample_and_the_epoch_goes_on() -> None:
    dataset = Streamed([1] * 10)

    def cost(sample: int) -> Any:
        return -1 if sample == 4 else 1

    with ThreadLoader(dataset, batch_size=3, max_batch_cost=10, sample_cost=cost, collate_fn=list) as loader:
        it, out = iter(loader), []
        with pytest.raises(ValueError, match="for sample #4 of worker 0's iterator it gave -1"):
            while True:
                out.append(next(it))
        out += list(it)
    assert out == [[0, 1, 2], [3, 5, 6], [7, 8, 9]]


def test_an_iterable_refuses_what_it_cannot_cut_naming_it() -> None:
    with pytest.raises(ValueError, match="max_batch_cost does not apply to an IterableDataset with batch_size=None"):
        ThreadLoader(Streamed([1] * 8), max_batch_cost=9, sample_cost=int, batch_size=None)


def test_an_iterable_state_from_another_budget_is_refused_and_len_is_unknown() -> None:
    dataset = Streamed([3] * 20)
    with ThreadLoader(dataset, batch_size=4, max_batch_cost=10, sample_cost=dataset.cost) as loader:
        with pytest.raises(TypeError, match="max_batch_cost"):
            len(loader)
        it = iter(loader)
        next(it)
        state = loader.state_dict()
        it.close()
    with ThreadLoader(dataset, batch_size=4, max_batch_cost=12, sample_cost=dataset.cost) as other:
        with pytest.raises(ValueError, match="max_batch_cost=10 there, 12 here"):
            other.load_state_dict(state)


def test_an_iterable_epoch_stopped_early_leaves_no_thread_and_reads_boundedly() -> None:
    """Each worker reads ahead at most its prefetch of batches, each at most ``batch_size``
    samples plus the window being sorted; a closed epoch leaves no thread."""
    costs = [1 + (i * 13) % 9 for i in range(4000)]
    dataset = Streamed(costs)
    with ThreadLoader(
        dataset, batch_size=4, num_workers=2, prefetch_factor=2, collate_fn=list, max_batch_cost=12,
        sample_cost=dataset.cost, group_window=10,
    ) as loader:  # fmt: skip
        it = iter(loader)
        delivered = sum(len(next(it)) for _ in range(20))
        time.sleep(0.05)  # the workers run ahead as far as they may
        with dataset.lock:
            ahead = dataset.read[0] - delivered
        it.close()
        assert wait_for_no_loader_threads() == []
    assert ahead <= 2 * (2 * 4 + 10 + 4)  # workers x (prefetch x batch_size + window + a batch)
