"""Ray Data and Ray Train on one local cluster (2 CPUs): RayDataSource's rows, order, resume, close
and errors; a TorchTrainer with 2 CPU workers that each keep a ThreadLoader."""

from __future__ import annotations

import gc
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

pytest.importorskip("ray", reason="needs ray (the frameworks extra; it has no free-threaded wheel)")

import ray
import ray.data

import datapipes as dp
from torch_threadloader import ThreadLoader
from torch_threadloader.integrations.ray_data import RayDataSource

pytestmark = pytest.mark.slow  # a Ray cluster takes seconds to start

#: Ray Data's block prefetcher thread: ``WaitBlockPrefetcher`` in Ray 2.60's
#: ``ray/data/_internal/block_batching/util.py``, one per ``iter_batches`` epoch (made by
#: ``BatchIterator.__init__``). Ray stops it only when ``prefetch_batches_locally`` runs to the end
#: of the stream; an epoch closed or failed early leaves it parked for the life of the process
#: (the thread's target is the prefetcher's bound method, so its ``__del__`` never runs), and no
#: public call reaches it (docs/frameworks.md, "Close").
RAY_PREFETCHER = "Prefetcher"


class ParkedPrefetchers:
    """How many parked Ray ``Prefetcher`` threads a test may leave: at most one per Ray epoch it
    ends before the end of the stream (``allow``); a test that reads every epoch to its end, or
    uses Ray's actor prefetcher, is allowed none."""

    def __init__(self) -> None:
        self.allowed = 0

    def allow(self, epochs: int) -> None:
        self.allowed += epochs


@pytest.fixture
def parked(threads_left_allowed: list[Callable[[list[threading.Thread]], list[threading.Thread]]]) -> ParkedPrefetchers:
    """The test's allowance, a rule of the suite's leak check (``no_thread_leak``,
    tests/conftest.py): it may leave Ray's parked prefetchers, at most ``allowed`` of them (a
    test that does not ask for ``parked`` may leave none)."""
    allowance = ParkedPrefetchers()

    def prefetchers_allowed(alive: list[threading.Thread]) -> list[threading.Thread]:
        prefetchers = [t for t in alive if t.name == RAY_PREFETCHER]
        return prefetchers if len(prefetchers) <= allowance.allowed else []

    threads_left_allowed.append(prefetchers_allowed)
    return allowance


def threads_started(before: set[threading.Thread], allowed: int) -> tuple[list[str], list[threading.Thread]]:
    """Threads started since ``before`` that are still alive, waiting up to 2 s for them to end
    (a prefetcher whose stream ran to its end exits on its own, soon after: seen still alive
    at teardown under CI's load): the names of those that are not Ray's parked prefetcher, and
    the prefetchers, once at most ``allowed`` of them are left."""
    deadline = time.monotonic() + 2.0
    while True:
        alive = [t for t in threading.enumerate() if t not in before and t.is_alive()]
        others = sorted(t.name for t in alive if t.name != RAY_PREFETCHER)
        prefetchers = [t for t in alive if t.name == RAY_PREFETCHER]
        if (not others and len(prefetchers) <= allowed) or time.monotonic() >= deadline:
            return others, prefetchers
        time.sleep(0.02)


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    """One local Ray cluster for the module; after it, no child process of this one is left, and
    the signal handlers are this process's own again (Ray installs a SIGINT handler that talks to
    its actors: left behind, it turned a later test's Ctrl-C into Ray's error)."""
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    ctx = ray.data.DataContext.get_current()
    ctx.execution_options.preserve_order = True  # deterministic execution: exact resume
    ctx.enable_progress_bars = False
    yield
    ray.shutdown()
    for sig, handler in handlers.items():
        signal.signal(sig, handler)
    deadline = time.monotonic() + 30
    while True:
        left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before and p.is_running()]
        left = [p for p in left if p.status() != psutil.STATUS_ZOMBIE]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert not left, f"Ray left processes running: {[p.name() for p in left]}"


def rows(n: int) -> Any:
    return ray.data.range(n)


def test_rows_come_in_order_and_the_last_mile_runs_on_this_process_threads(cluster: None) -> None:
    def last_mile(row: dict[str, Any]) -> tuple[int, int, str]:
        return int(row["id"]), os.getpid(), threading.current_thread().name

    graph = dp.ThreadMapper(RayDataSource(rows(50), batch_size=8), last_mile, num_threads=2, name="last-mile")
    got = list(graph)
    assert [g[0] for g in got] == list(range(50))
    assert {g[1] for g in got} == {os.getpid()}
    assert {g[2] for g in got} == {"last-mile-0", "last-mile-1"}


def test_a_threadloader_over_the_source_resumes_exactly(cluster: None, parked: ParkedPrefetchers) -> None:
    parked.allow(1)  # the epoch stopped after 3 batches

    def make() -> ThreadLoader[Any]:
        graph = RayDataSource(rows(40), batch_size=6).map(lambda r: int(r["id"]) * 10, num_threads=2).batch(4)
        return ThreadLoader(graph.collate(), num_workers=1)

    full = [b.tolist() for b in make()]
    part = make()
    it = iter(part)
    first = [next(it).tolist() for _ in range(3)]
    state = part.state_dict()
    it.close()
    resumed = make()
    resumed.load_state_dict(state)
    assert first + [b.tolist() for b in resumed] == full
    assert isinstance(resumed, ThreadLoader)


def test_an_error_in_rays_pipeline_is_raised_by_next_with_a_note(cluster: None, parked: ParkedPrefetchers) -> None:
    parked.allow(1)  # the epoch that failed

    def bad(row: dict[str, Any]) -> dict[str, Any]:
        if row["id"] == 30:
            raise ValueError("row 30 is bad")
        return row

    it = iter(RayDataSource(rows(64).map(bad), batch_size=8))
    seen = 0
    with pytest.raises(Exception, match="row 30 is bad") as info:
        for _ in it:
            seen += 1
    assert seen <= 30
    assert any("RayDataSource" in n for n in getattr(info.value, "__notes__", []))


def ids_loader(source: Any) -> ThreadLoader[Any]:
    graph = RayDataSource(source, batch_size=8).map(lambda r: int(r["id"]), num_threads=2).batch(4)
    return ThreadLoader(graph.collate(), num_workers=1)


def bad_at(n: int) -> Any:
    def bad(row: dict[str, Any]) -> dict[str, Any]:
        if row["id"] == n:
            raise ValueError(f"row {n} is bad")
        return row

    return bad


def end_by_break() -> None:
    for i, _ in enumerate(ids_loader(rows(4000))):
        if i == 2:
            break


def end_by_close() -> None:
    it = iter(ids_loader(rows(4000)))
    next(it)
    it.close()  # type: ignore[attr-defined]


def end_by_a_caught_error() -> None:
    with pytest.raises(Exception, match="row 100 is bad"):  # Ray re-raises it as its RayTaskError
        for _ in ids_loader(rows(4000).map(bad_at(100))):
            pass


def end_by_dropping_the_epoch() -> None:
    it = iter(ids_loader(rows(4000)))
    next(it)
    del it
    gc.collect()


@pytest.mark.parametrize("end", [end_by_break, end_by_close, end_by_a_caught_error, end_by_dropping_the_epoch])
def test_rays_iterator_is_closed_when_a_threadloader_ends_its_epoch_early(
    cluster: None, parked: ParkedPrefetchers, end: Any
) -> None:
    """Ray's streaming executor (a thread of this process) and its iteration threads stop when
    the loader's epoch ends early: only Ray's own parked Prefetcher may stay (RAY_PREFETCHER)."""
    before = set(threading.enumerate())
    end()
    others, prefetchers = threads_started(before, 1)
    assert not others, f"{end.__name__}: Ray's iterator left {others} running"
    assert len(prefetchers) <= 1
    parked.allow(1)


def test_with_rays_actor_prefetcher_an_early_end_leaves_no_thread(cluster: None) -> None:
    """``DataContext.actor_prefetcher_enabled`` (Ray's setting) prefetches with an actor instead
    of the Prefetcher thread: then a break leaves nothing behind in this process."""
    context = ray.data.DataContext.get_current()
    context.actor_prefetcher_enabled = True
    try:
        end_by_break()
        end_by_close()
    finally:
        context.actor_prefetcher_enabled = False


def test_bad_arguments_are_named(cluster: None) -> None:
    with pytest.raises(TypeError, match="iter_batches"):
        RayDataSource([1, 2, 3])
    with pytest.raises(ValueError, match="batch_size"):
        RayDataSource(rows(4), batch_size=0)
    assert isinstance(RayDataSource(rows(4)), dp.Node)


def test_torch_trainer_workers_each_keep_a_threadloader(cluster: None, tmp_path: Path) -> None:
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from tests.fixtures.frameworks import ray_train_loop

    trainer = TorchTrainer(
        ray_train_loop,
        train_loop_config={"out": str(tmp_path)},
        scaling_config=ScalingConfig(num_workers=2, use_gpu=False, resources_per_worker={"CPU": 0.5}),
        run_config=RunConfig(storage_path=str(tmp_path / "ray"), name="threadloader"),
        datasets={"train": ray.data.range(48)},
    )
    trainer.fit()
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert results[0]["pid"] != results[1]["pid"]
    for r in results:
        assert r["is_threadloader"] and r["class"] == "ThreadLoader", "prepare_data_loader kept the ThreadLoader"
        assert r["sampler"] == "DistributedSampler"
        assert len(r["seen"]) == 4, "each worker loads its half of 32 samples in batches of 4"
        assert r["shard_pids"] == [r["pid"]], "the shard's last mile ran in the worker's own process"
        assert r["shard_threads"] == ["last-mile-0", "last-mile-1"]
        assert r["settings_lost"] == [], "prepare_data_loader rebuilt the loader without these settings"
    halves = [sorted(i for b in r["seen"] for i in b) for r in results]
    assert sorted(halves[0] + halves[1]) == list(range(32)), "the DistributedSampler shards cover the data once"
    assert sorted(results[0]["shard"] + results[1]["shard"]) == list(range(48)), "Ray's shards cover the rows"
