"""ThreadLoader(stats=True): stats per stage, and report()'s verdict on pipelines whose limit
is known (a delay injected in one stage, or pure-Python work)."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch.utils.data import Dataset, IterableDataset

from torch_threadloader import ThreadLoader
from torch_threadloader.stats import stage, verdict

ITEMS = 96


class Work(Dataset[int]):
    """Item ``i`` after ``fetch`` seconds of waiting, ``transform`` seconds of waiting marked
    as the transform, and ``python`` loop turns of pure-Python work."""

    def __init__(self, fetch: float = 0.0, transform: float = 0.0, python: int = 0) -> None:
        self.fetch, self.transform, self.python = fetch, transform, python

    def __len__(self) -> int:
        return ITEMS

    def __getitem__(self, i: int) -> int:
        if self.fetch:
            time.sleep(self.fetch)
        if self.transform:
            with stage("transform"):
                time.sleep(self.transform)
        x = 0
        for j in range(self.python):
            x += j * j
        return i


class AsyncWork(Work):
    async def __getitem__(self, i: int) -> int:  # type: ignore[override]
        await asyncio.sleep(self.fetch)
        return i


class Stream(IterableDataset[int]):
    def __iter__(self) -> Iterator[int]:
        info = torch.utils.data.get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        yield from range(start, ITEMS, step)


def epoch_stats(loader: ThreadLoader[Any], consumer: float = 0.0) -> dict[str, Any]:
    with loader:
        for _ in loader:
            if consumer:
                time.sleep(consumer)
        return loader.stats()


@pytest.mark.parametrize("nw,procs", [(0, 0), (2, 0), (1, 2)], ids=["inline", "threads", "processes"])
@pytest.mark.parametrize("kind", ["map", "async", "iterable"])
def test_stages_count_every_item_and_batch(nw: int, procs: int, kind: str) -> None:
    data: Any = {"map": Work(), "async": AsyncWork(), "iterable": Stream()}[kind]
    stats = epoch_stats(ThreadLoader(data, batch_size=8, num_workers=nw, worker_processes=procs, stats=True))
    stages = stats["stages"]
    assert stats["enabled"] and stats["batches"] == ITEMS // 8
    assert stages["fetch"]["count"] == ITEMS
    assert stages["handover"]["count"] == ITEMS // 8
    assert stages["train"]["count"] == ITEMS // 8 - 1  # the time between batches
    if kind != "async":
        assert stages["collate"]["count"] == ITEMS // 8
    if kind != "iterable":
        assert stages["sampling"]["count"] == ITEMS // 8
    for name in ("fetch", "handover"):
        s = stages[name]
        assert 0 <= s["p50_s"] <= s["p90_s"] <= s["p99_s"]
        assert s["busy_s"] > 0
    assert stats["graph"], "the graph's own counters are still there"


def test_latency_percentiles_follow_the_items() -> None:
    stats = epoch_stats(ThreadLoader(Work(fetch=0.004), batch_size=4, num_workers=2, stats=True))
    fetch = stats["stages"]["fetch"]
    assert fetch["p50_s"] >= 0.004 * 0.99, fetch  # every item sleeps at least 4 ms
    assert fetch["busy_s"] >= ITEMS * 0.004


def test_errors_are_counted_in_their_stage() -> None:
    class Failing(Work):
        def __getitem__(self, i: int) -> int:
            if i % 10 == 3:
                raise ValueError(i)
            return i

    loader = ThreadLoader(Failing(), batch_size=4, num_workers=2, stats=True)
    failed = 0
    it = iter(loader)
    while True:
        try:
            next(it)
        except ValueError:
            failed += 1
        except StopIteration:
            break
    assert loader.stats()["stages"]["fetch"]["errors"] == failed == len([i for i in range(ITEMS) if i % 10 == 3])
    loader.close()


@pytest.mark.parametrize("nw", [0, 2])
def test_skipped_samples_are_counted_once_each(nw: int) -> None:
    class Failing(Work):
        def __getitem__(self, i: int) -> int:
            if i in (5, 8, 9, 10, 11):  # one sample of a batch; a whole batch
                raise ValueError(i)
            return i

    with ThreadLoader(Failing(), batch_size=4, num_workers=nw, on_error="skip", stats=True) as loader:
        it = iter(loader)
        outcomes = []
        while True:
            try:
                outcomes.append(next(it))
            except RuntimeError as exc:  # the batch with no good sample to fill it
                outcomes.append(str(exc))
            except StopIteration:
                break
        assert "every sample of the batch failed" in outcomes[2]
        assert loader.stats()["stages"]["fetch"]["errors"] == len(loader.errors()) == 5


def test_stats_off_costs_nothing_and_says_so() -> None:
    loader = ThreadLoader(Work(), batch_size=8)
    list(loader)
    assert loader.stats()["enabled"] is False and loader.stats()["stages"] == {}
    assert "stats=True" in loader.report()


def test_stage_outside_a_loader_is_a_no_op_and_refuses_unknown_names() -> None:
    with stage("transform"):
        pass
    loader = ThreadLoader(Work(), batch_size=8, stats=True)

    class Bad(Work):
        def __getitem__(self, i: int) -> int:
            with stage("decode"):
                return i

    bad = ThreadLoader(Bad(), batch_size=8, stats=True)
    with pytest.raises(ValueError, match="stage must be one of"):
        next(iter(bad))
    bad.close()
    loader.close()


# -- verdicts ---------------------------------------------------------------------------------


def kind_of(stats: dict[str, Any]) -> str:
    return verdict(stats)[0]


def test_verdict_fetch_bound() -> None:
    stats = epoch_stats(ThreadLoader(Work(fetch=0.003), batch_size=8, num_workers=2, stats=True))
    assert kind_of(stats) == "fetch-bound", verdict(stats)[1]
    assert "item_concurrency" in verdict(stats)[1]


def test_verdict_transform_bound() -> None:
    stats = epoch_stats(ThreadLoader(Work(transform=0.003), batch_size=8, num_workers=2, stats=True))
    assert kind_of(stats) == "transform-bound", verdict(stats)[1]


def test_verdict_collate_bound() -> None:
    def slow_collate(batch: list[int]) -> torch.Tensor:
        time.sleep(0.01)
        return torch.tensor(batch)

    stats = epoch_stats(ThreadLoader(Work(), batch_size=8, num_workers=2, collate_fn=slow_collate, stats=True))
    assert kind_of(stats) == "collate-bound", verdict(stats)[1]


def test_verdict_training_bound() -> None:
    # The first batch's hand-off holds the epoch's start (threads starting), which a loaded
    # machine stretches to tens of ms: a 50 ms step keeps it under a tenth of the waits (one
    # CI run under load saw a 10 ms step lose to it).
    stats = epoch_stats(ThreadLoader(Work(), batch_size=8, num_workers=2, stats=True), consumer=0.05)
    kind, text = verdict(stats)
    assert kind == "training-bound", text
    assert "waits" in text


#: The GIL-bound verdicts need a GIL: on a free-threaded build the threads do not take turns.
needs_gil = pytest.mark.skipif(
    not getattr(sys, "_is_gil_enabled", lambda: True)(),
    reason="free-threaded build with the GIL off: pure-Python threads run in parallel, nothing is GIL-bound",
)


def skip_if_the_machine_was_busy(stats: dict[str, Any], kind: str, text: str) -> None:
    """The GIL verdict needs a CPU free beside the loader (threads taking turns on the GIL look,
    on a busy machine, like threads waiting for a CPU): skip where other processes (the suite's
    own parallel workers) kept the loader's threads waiting or left no core idle."""
    runq = stats["sampled_runq_s"] / max(stats["sampled_busy_s"], 1e-9)
    idle = stats.get("machine_idle_cores")
    if kind != "gil-bound" and (runq > 0.3 or (idle is not None and idle < 0.5)):
        pytest.skip(
            f"other processes kept the loader's threads waiting for a CPU {runq:.0%} of the time "
            f"({idle} cores idle): {text}"
        )


@needs_gil
def test_verdict_gil_bound() -> None:
    stats = epoch_stats(ThreadLoader(Work(python=30_000), batch_size=4, num_workers=3, stats=True))
    kind, text = verdict(stats)
    skip_if_the_machine_was_busy(stats, kind, text)
    assert kind == "gil-bound", text
    assert "processes" in text


@needs_gil
def test_verdict_gil_bound_in_worker_processes_counts_per_process() -> None:
    # One process of 3 threads: they take turns on its GIL; the change is more processes.
    stats = epoch_stats(ThreadLoader(Work(python=30_000), batch_size=4, num_workers=3, worker_processes=1, stats=True))
    kind, text = verdict(stats)
    skip_if_the_machine_was_busy(stats, kind, text)
    assert stats["worker_processes_cpu_s"] > 0.5 * stats["process_cpu_s"]  # the work ran in the child
    assert kind == "gil-bound", text
    assert "Raise worker_processes (now 1)" in text


def fetch_snapshot(*, cpu_share: float, **fields: Any) -> dict[str, Any]:
    """A stats snapshot whose work is all in ``fetch`` (3 s busy over 96 items, the stage's
    CPU share ``cpu_share``), the training step waiting; ``fields`` set the rest."""
    stage = {"count": 96, "errors": 0, "retries": 0, "busy_s": 3.0, "cpu_share": cpu_share}
    idle = {**stage, "busy_s": 0.0}
    return {
        "stages": {
            "sampling": idle,
            "fetch": stage,
            "transform": idle,
            "collate": idle,
            "pin": idle,
            "handover": {**stage, "busy_s": 1.0},
            "train": {**stage, "busy_s": 0.1},
        },
        "batches": 24,
        "cores": 2,
        "sampled_busy_s": 3.0,
        "item_concurrency": 1,
        "worker_processes": 0,
        "worker_processes_cpu_s": 0.0,
        **fields,
    }


def test_verdict_never_names_the_gil_of_an_interpreter_without_one() -> None:
    # Threads blocked 60% of their busy time while the process ran one core: the GIL's mark on
    # a GIL build; on a free-threaded build, where the snapshot says the GIL is off, not the GIL.
    snapshot = fetch_snapshot(
        cpu_share=0.4,
        wall_s=1.0,
        cores_used=1.0,
        machine_idle_cores=1.0,
        sampled_cpu_s=1.2,
        sampled_runq_s=0.0,
        num_workers=3,
    )
    assert verdict({**snapshot, "gil_enabled": True})[0] == "gil-bound"
    kind, text = verdict({**snapshot, "gil_enabled": False})
    assert kind == "cpu-bound", text
    assert "GIL" not in text


def test_verdict_of_threads_waiting_for_a_cpu_is_cpu_bound_not_io() -> None:
    # Compute-bound threads on a machine other processes load: little CPU time in the stage's
    # own time (they wait in the run queue), which is not I/O.
    snapshot = fetch_snapshot(
        cpu_share=0.2,
        wall_s=1.5,
        cores_used=0.4,
        machine_idle_cores=0.0,
        sampled_cpu_s=0.6,
        sampled_runq_s=2.1,
        num_workers=2,
        gil_enabled=True,
    )
    kind, text = verdict(snapshot)
    assert kind == "cpu-bound", text
    assert "other processes kept it waiting for a CPU" in text
    # The same threads blocked, not queued for a CPU: they wait (I/O).
    waiting = {**snapshot, "sampled_runq_s": 0.0}
    assert verdict(waiting)[0] == "fetch-bound"


def test_snapshot_says_whether_the_gil_is_on() -> None:
    stats = epoch_stats(ThreadLoader(Work(), batch_size=8, stats=True))
    assert stats["gil_enabled"] is getattr(sys, "_is_gil_enabled", lambda: True)()


def test_report_names_the_verdict_and_the_stages() -> None:
    loader = ThreadLoader(Work(fetch=0.002), batch_size=8, num_workers=2, stats=True)
    list(loader)
    text = loader.report()
    loader.close()
    first, *rest = text.splitlines()
    assert first.startswith("fetch-bound")
    assert any(line.startswith("fetch ") for line in rest)
    assert any(line.startswith("handover ") for line in rest)


class MatMul(Work):
    """Items that compute without the GIL (a torch matmul)."""

    def __getitem__(self, i: int) -> int:
        a = torch.ones(200, 200)
        for _ in range(4):
            a = a @ a / 200
        return i


def test_verdict_cpu_bound() -> None:
    stats = epoch_stats(ThreadLoader(MatMul(), batch_size=4, num_workers=2, stats=True))
    kind, text = verdict(stats)
    assert kind == "cpu-bound", text
    assert "num_workers" in text
