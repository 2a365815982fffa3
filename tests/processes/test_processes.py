"""``ThreadLoader(worker_processes=P)``, its lifecycle and errors: timeouts, a close from another
thread, a child that dies, none outliving the loader or its process; and what only processes
have (pickling, niceness, affinity). What processes give (torch's batches, resume, stats and
skip records) is checked in ``test_results.py``.

The tests run in both modes (``mode``, tests/processes/conftest.py) use the same total of
workers ``W``: ``num_workers=W`` threads, or ``P=2`` processes of ``W // 2`` threads; thread
``t`` of process ``c`` is worker ``t * P + c``, so batch ``i`` is loaded by worker ``i % W`` in
both. Loaders are closed in each test; starting a child costs about 0.1 s once the forkserver runs.
"""

from __future__ import annotations

import gc
import os
import signal
import threading
import time
import weakref
from pathlib import Path
from typing import Any

import pytest
import torch

import datapipes as dp
from tests.fixtures.datasets import (
    FailsAt,
    FileGate,
    Shards,
    SleepsAt,
    Unsendable,
    WaitsForFileAt,
    moment,
)
from tests.fixtures.processes import (
    AffinityOf,
    DiesAt,
    HoldsALock,
    Jittered,
    NiceOf,
    PidOf,
    Seen,
    ShardSleepsAt,
    ShardWaitsForFileAt,
    StreamDiesAt,
    W,
    init_fails_for_worker_1,
    loader_children,
    loader_in,
    wait_gone,
)
from tests.fixtures.scripts import run_timed
from tests.fixtures.threads import WaitingConsumer
from tests.fixtures.values import flat, next_past_timeouts
from torch_threadloader import ThreadLoader, WorkerProcessError
from torch_threadloader.loader import LoaderTimeoutError

pytestmark = pytest.mark.usefixtures("no_child_left")  # every test closes its loaders: no worker process is left


# -- errors -----------------------------------------------------------------------------------


def test_an_error_fails_only_its_batch_with_its_type_and_message(mode: dict[str, int]) -> None:
    with loader_in(FailsAt(20, bad=9, odd=14), mode, batch_size=4) as ld:
        it = iter(ld)
        out: list[Any] = []
        for _ in range(5):
            try:
                out.append(next(it))
            except Exception as exc:
                out.append(exc)
        with pytest.raises(StopIteration):
            next(it)
    assert isinstance(out[2], ValueError) and str(out[2]) == "bad item 9"
    assert isinstance(out[3], Unsendable) and str(out[3]) == "odd item 14"  # rebuilt: it does not pickle
    assert flat([b for b in out if isinstance(b, torch.Tensor)]) == [*range(8), *range(16, 20)]


@pytest.mark.parametrize("iterable", [False, True])
def test_a_failing_worker_init_fn_fails_that_workers_batches(mode: dict[str, int], iterable: bool) -> None:
    dataset = Shards(16, pause=moment) if iterable else Jittered(16)
    with loader_in(dataset, mode, batch_size=2, worker_init_fn=init_fails_for_worker_1) as ld:
        it = iter(ld)
        out: list[Any] = []
        for _ in range(10):
            try:
                out.append(flat([next(it)]))
            except StopIteration:
                break
            except KeyError as exc:
                out.append(str(exc))
    error = "'worker 1 cannot start'"
    if iterable:
        # Worker 1's turns keep failing (its share never ends, in process as in processes).
        assert out == [[0, 4], error, [2, 6], [3, 7], [8, 12], error, [10, 14], [11, 15], error, error]
    else:
        assert out == [[2 * j, 2 * j + 1] if j % W != 1 else error for j in range(8)]


def test_timeout_names_the_batch_which_keeps_its_place(mode: dict[str, int], tmp_path: Path) -> None:
    gate = FileGate(tmp_path)
    with loader_in(WaitsForFileAt(12, 5, gate.release), mode, batch_size=2, timeout=0.2) as ld:
        it = iter(ld)
        # The timeout is for batch 2; the first two may take longer while the processes start.
        assert flat([next_past_timeouts(it, 0), next_past_timeouts(it, 1)]) == [0, 1, 2, 3]
        try:
            with pytest.raises(LoaderTimeoutError, match=r"batch 2 \(indices \[4, 5\]\)"):
                next(it)
        finally:
            gate.open()
        rest = []
        while True:
            try:
                rest.append(next(it))
            except LoaderTimeoutError:
                continue
            except StopIteration:
                break
    assert flat(rest) == list(range(4, 12))


def test_timeout_bounds_one_next_of_an_iterable_dataset_whose_batch_keeps_its_place(
    mode: dict[str, int], tmp_path: Path
) -> None:
    """An ``IterableDataset``: ``timeout`` bounds one ``next()`` and raises the loader's
    timeout error, the same in threads and in worker processes, and the batch keeps its place."""
    gate = FileGate(tmp_path)
    with loader_in(ShardWaitsForFileAt(12, at=5, path=gate.release), mode, batch_size=1, timeout=0.3) as ld:
        it = iter(ld)
        # The timeout is for batch 5; the first ones may take longer while the processes start.
        got = [next_past_timeouts(it, b) for b in range(5)]
        start = time.monotonic()
        try:
            with pytest.raises(LoaderTimeoutError) as info:
                next(it)
            waited = time.monotonic() - start
        finally:
            gate.open()
        while True:
            try:
                got.append(next(it))
            except LoaderTimeoutError:
                continue
            except StopIteration:
                break
    assert type(info.value) is LoaderTimeoutError and isinstance(info.value, TimeoutError)
    assert str(info.value) == "DataLoader timed out after 0.3 seconds waiting for batch 5", str(info.value)
    assert (info.value.batch, info.value.indices) == (5, None)
    assert waited > 0.25, waited  # not before its time (the gate holds the batch until the test opens it)
    assert flat(got) == list(range(12))


@pytest.mark.parametrize("iterable", [False, True])
@pytest.mark.parametrize("closer", ["epoch", "loader"])
def test_close_from_another_thread_wakes_a_waiting_next(
    mode: dict[str, int], closer: str, iterable: bool, tmp_path: Path
) -> None:
    """Batch 2 is stuck at a gate until the test opens it: the close wakes the ``next()`` that
    waits for it (the gate opens only once that ``next()`` has raised)."""
    gate = FileGate(tmp_path)
    path = gate.release
    dataset = ShardWaitsForFileAt(8, 2, path, gate.started) if iterable else WaitsForFileAt(8, 2, path, gate.started)
    with loader_in(dataset, mode, batch_size=1) as ld:
        it = iter(ld)
        next(it), next(it)
        close = (it if closer == "epoch" else ld).close
        assert WaitingConsumer().next_raises_closed(it, gate, close), "next() was not seen waiting before the close"
        with pytest.raises(StopIteration):
            next(it)


# -- processes only ---------------------------------------------------------------------------


def test_each_process_loads_its_share_and_the_processes_persist_across_epochs() -> None:
    with ThreadLoader(PidOf(8), batch_size=1, worker_processes=2) as ld:
        first, second = flat(list(ld)), flat(list(ld))
        pids = {p.pid for p in loader_children()}
    assert os.getpid() not in first
    assert first[0::2] == [first[0]] * 4 and first[1::2] == [first[1]] * 4 and first[0] != first[1]
    assert second == first and set(first) == pids


def test_stats_gather_each_processs_graph() -> None:
    with ThreadLoader(Jittered(30), batch_size=2, num_workers=2, worker_processes=2) as ld:
        assert len(list(ld)) == 15
        stats = ld.stats()["graph"]  # the epoch graph's counters (stats=True keeps per-stage ones in-process)
    assert stats["items_out"] == 15
    assert [p["items_out"] for p in stats["processes"]] == [8, 7]  # batch j in process j % 2
    assert all(p["name"] == "threadloader-worker" for p in stats["processes"])


def test_lightnings_reinstantiation_with_a_distributed_sampler_keeps_the_processes() -> None:
    data = pytest.importorskip("lightning.fabric.utilities.data")
    with ThreadLoader(Seen(12), batch_size=3, num_workers=1, worker_processes=2) as ld:
        sampler = torch.utils.data.DistributedSampler(Seen(12), num_replicas=2, rank=1, shuffle=False)
        with data._update_dataloader(ld, sampler) as rank1:
            assert rank1.worker_processes == 2
            assert flat([b[:, 0] for b in rank1]) == [1, 3, 5, 7, 9, 11]


def test_process_nice_lowers_every_thread_of_the_processes() -> None:
    mine = os.getpriority(os.PRIO_PROCESS, 0)
    with ThreadLoader(
        NiceOf(), batch_size=1, num_workers=2, item_concurrency=1, worker_processes=1, process_nice=3
    ) as ld:
        assert flat(list(ld)) == [min(mine + 3, 19)] * 2
        (child,) = loader_children()
        assert os.getpriority(os.PRIO_PROCESS, child.pid) == min(mine + 3, 19)
    assert os.getpriority(os.PRIO_PROCESS, 0) == mine
    with pytest.raises(ValueError, match="process_nice applies to worker processes"):
        ThreadLoader(NiceOf(), process_nice=3)
    with pytest.raises(ValueError, match="from 0 to 19"):
        ThreadLoader(NiceOf(), worker_processes=1, process_nice=-1)


def thread_cpus(pid: int) -> set[frozenset[int]]:
    """The CPU sets of every thread of process ``pid``."""
    out = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            out.add(frozenset(os.sched_getaffinity(int(tid))))
        except OSError:  # the thread ended meanwhile
            pass
    return out


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="Linux only")
def test_process_affinity_pins_every_thread_of_each_process() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    first = cpus[:1]
    with ThreadLoader(AffinityOf(), batch_size=None, num_workers=2, worker_processes=1, process_affinity=first) as ld:
        assert list(ld) == [first] * 4  # each worker thread of the process runs on it
        (child,) = loader_children()
        assert thread_cpus(child.pid) == {frozenset(first)}
    assert sorted(os.sched_getaffinity(0)) == cpus  # the loader's process keeps its own
    if len(cpus) >= 2:  # a caller pinned to one CPU may still give the processes another
        os.sched_setaffinity(0, cpus[:1])
        try:
            ThreadLoader(AffinityOf(), worker_processes=1, process_affinity=cpus[1:2]).close()
        finally:
            os.sched_setaffinity(0, cpus)
    if len(cpus) < 2:
        pytest.skip("one CPU: no second set to give a second process")
    per = [[cpus[0]], [cpus[1]]]
    with ThreadLoader(AffinityOf(), batch_size=None, num_workers=1, worker_processes=2, process_affinity=per) as ld:
        assert list(ld) == [per[0], per[1]] * 2  # item i is loaded by process i % 2
        children = sorted(loader_children(), key=lambda p: p.name)
        assert [thread_cpus(c.pid) for c in children] == [{frozenset(per[0])}, {frozenset(per[1])}]


def test_process_affinity_is_checked_and_named() -> None:
    with pytest.raises(ValueError, match="process_affinity applies to worker processes"):
        ThreadLoader(Seen(4), process_affinity=[0])
    with pytest.raises(ValueError, match="2 CPU sets for worker_processes=3"):
        ThreadLoader(Seen(4), worker_processes=3, process_affinity=[[0], [0]])
    with pytest.raises(ValueError, match="not available to this process"):
        ThreadLoader(Seen(4), worker_processes=1, process_affinity=[10_000])
    with pytest.raises(ValueError, match="non-empty set of ints >= 0"):
        ThreadLoader(Seen(4), worker_processes=1, process_affinity=[-1])
    with pytest.raises(ValueError, match="non-empty set of ints"):
        ThreadLoader(Seen(4), worker_processes=1, process_affinity=[[]])
    with pytest.raises(TypeError, match="process_affinity must be CPU numbers"):
        ThreadLoader(Seen(4), worker_processes=1, process_affinity="0")


def test_a_dataset_that_cannot_be_pickled_is_named() -> None:
    with ThreadLoader(HoldsALock(), worker_processes=1) as ld, pytest.raises(TypeError, match="HoldsALock"):
        iter(ld)


def test_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="worker_processes"):
        ThreadLoader(Seen(4), worker_processes=-1)
    with pytest.raises(ValueError, match="multiprocessing_context"):
        ThreadLoader(Seen(4), multiprocessing_context="spawn")
    with pytest.raises(ValueError, match="start method"):
        ThreadLoader(Seen(4), worker_processes=1, multiprocessing_context="nonesuch")


@pytest.mark.parametrize(
    ("how", "ended"), [("exit", "exited with code 3"), ("kill", "SIGKILL"), ("segfault", "SIGSEGV")]
)
def test_a_child_that_dies_is_an_error_naming_it_and_the_next_epoch_replaces_it(how: str, ended: str) -> None:
    # Index 9 is in batch 4, which process 0 loads (batch j goes to process j % 2).
    with ThreadLoader(DiesAt(16, at=9, how=how), batch_size=2, worker_processes=2) as ld:
        for _ in range(2):
            it = iter(ld)
            got: list[Any] = []
            with pytest.raises(WorkerProcessError, match=rf"worker process 0 \(pid \d+, .*\) .*{ended}") as info:
                for batch in it:
                    got.append(batch)
            # What it sent before it died is handed out, unless its tensors went with it.
            assert flat(got) == list(range(2 * len(got))) and len(got) <= 4
            assert f"batch {len(got)}" in str(info.value) and info.value.process == 0
            with pytest.raises(StopIteration):
                next(it)
            del it


@pytest.mark.parametrize("in_order", [True, False])
def test_a_killed_child_of_an_iterable_dataset_is_an_error_naming_it_and_leaves_nothing_running(
    in_order: bool,
) -> None:
    """A worker process killed while it reads its share of an ``IterableDataset``: ``next()``
    raises ``WorkerProcessError`` naming it (its number, pid and exit code), the epoch ends
    there, no thread or process of the epoch runs on, and the next epoch replaces it."""
    from tests.fixtures.threads import wait_for_no_loader_threads

    # Worker 0 of 2 (process 0) reaches 8 at its 3rd batch (0, 2 / 4, 6 / 8, ...).
    with ThreadLoader(StreamDiesAt(16, at=8, how="kill"), batch_size=2, worker_processes=2, in_order=in_order) as ld:
        it = iter(ld)
        pids = [p.pid for p in loader_children()]
        got: list[Any] = []
        with pytest.raises(WorkerProcessError, match=r"worker process 0 \(pid \d+, .*\) was killed by SIGKILL") as info:
            for batch in it:
                got.append(batch)
        lost = info.value
        assert isinstance(lost, dp.WorkerLostError)
        assert (lost.process, lost.exitcode) == (0, -9) and lost.pid in pids
        assert lost.worker is not None and lost.worker.startswith(f"worker process 0 (pid {lost.pid}")
        assert len(got) < 8
        with pytest.raises(StopIteration):
            next(it)
        del it
        assert wait_for_no_loader_threads() == []
        assert wait_gone([lost.pid], 1.0) == []
        ld.dataset.at = -1  # the process started in its place is sent the dataset as it is now
        assert sorted(flat(list(ld))) == list(range(16))
        now = [p.pid for p in loader_children()]
        assert len(now) == 2 and lost.pid not in now
    assert wait_gone([pid for pid in now if pid is not None], 6.0) == []


@pytest.mark.parametrize("dataset", ["map, out of order", "iterable"])
def test_a_child_that_dies_out_of_order_or_in_a_stream_is_an_error_too(dataset: str) -> None:
    if dataset == "iterable":  # worker 0 of 2 (process 0) reaches 8 at its 3rd batch (0, 2 / 4, 6 / 8, ...)
        ld = ThreadLoader(StreamDiesAt(16, at=8), batch_size=2, worker_processes=2)
    else:
        ld = ThreadLoader(DiesAt(16, at=9, how="exit"), batch_size=2, worker_processes=2, in_order=False)
    with ld:
        it = iter(ld)
        got: list[Any] = []
        with pytest.raises(WorkerProcessError, match=r"worker process 0 .* exited with code 3"):
            for batch in it:
                got.append(batch)
        assert len(got) < 8
        with pytest.raises(StopIteration):
            next(it)
        del it


def test_break_ends_the_epoch_and_close_ends_the_children() -> None:
    ld = ThreadLoader(Jittered(40), batch_size=2, worker_processes=2)
    for i, _ in enumerate(ld):
        if i == 3:
            break
    gc.collect()
    assert flat(list(ld)) == list(range(40))  # the same processes load the next epoch
    pids = [p.pid for p in loader_children()]
    assert len(pids) == 2
    ld.close()
    assert wait_gone(pids, 1.0) == []
    assert flat(list(ld)) == list(range(40))  # iterating again starts new ones
    ld.close()


def test_a_close_while_a_child_starts_stops_that_child(monkeypatch: pytest.MonkeyPatch) -> None:
    """``loader.close()`` from another thread while ``iter()`` starts a worker process (after
    the child is up, before the pool holds it): the epoch is closed and the child stopped.
    Found in review: the pool, closed and let go by the loader, kept the child running."""
    from torch_threadloader.processes.pool import WorkerProcesses

    start = WorkerProcesses._start
    ld = ThreadLoader(Jittered(8), batch_size=2, worker_processes=2)

    def start_then_close(self: WorkerProcesses, index: int) -> Any:
        child = start(self, index)
        if index == 1:
            closer = threading.Thread(target=ld.close)
            closer.start()
            closer.join()
        return child

    monkeypatch.setattr(WorkerProcesses, "_start", start_then_close)
    try:
        with pytest.raises(dp.EpochClosedError):
            next(iter(ld))
        assert [p.pid for p in loader_children() if p.is_alive()] == []  # while the loader lives
        monkeypatch.undo()
        assert flat(list(ld)) == list(range(8))  # a new pool
    finally:
        ld.close()


def test_two_live_epochs_of_one_loader_do_not_wait_on_each_other() -> None:
    with ThreadLoader(Jittered(12), batch_size=3, worker_processes=2) as ld:
        pairs = [(flat([a]), flat([b])) for a, b in zip(ld, ld, strict=True)]  # the second starts its own
        assert len(loader_children()) == 2  # and stopped them when it ended
    assert pairs == [(list(range(i, i + 3)), list(range(i, i + 3))) for i in range(0, 12, 3)]


def test_garbage_collection_of_the_loader_ends_the_children() -> None:
    def run() -> tuple[weakref.ref[Any], list[int]]:
        ld = ThreadLoader(Jittered(10), batch_size=2, worker_processes=2)
        it = iter(ld)
        next(it)
        return weakref.ref(ld), [p.pid for p in loader_children()]

    ref, pids = run()
    gc.collect()
    assert ref() is None
    assert wait_gone(pids, 6.0) == []


@pytest.mark.parametrize("iterable", [False, True])
def test_ctrl_c_in_next_ends_the_children(iterable: bool) -> None:
    dataset = ShardSleepsAt(8, at=2, seconds=30) if iterable else SleepsAt(8, at=2, seconds=30)
    ld = ThreadLoader(dataset, batch_size=1, worker_processes=2)
    it = iter(ld)
    next(it)
    pids = [p.pid for p in loader_children()]
    previous = signal.signal(signal.SIGALRM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with pytest.raises(KeyboardInterrupt):
            next(it)
            next(it)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert wait_gone(pids, 2.0) == []
    del it
    ld.close()


def test_fork_is_refused_once_threads_run() -> None:
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, name="busy")
    thread.start()
    try:
        with ThreadLoader(Seen(4), worker_processes=1, multiprocessing_context="fork") as ld:
            with pytest.raises(RuntimeError, match=r"'fork' with threads running .*busy"):
                iter(ld)
    finally:
        stop.set()
        thread.join()


PARENT = """
import os, signal, sys
from torch_threadloader import ThreadLoader
from tests.fixtures.datasets import SleepsAt
from tests.fixtures.processes import loader_children
if __name__ == "__main__":
    # Killed: the default start (forkserver); exiting: fork (its children close the parent's pipe ends).
    context = None if sys.argv[1] == "kill" else "fork"
    ld = ThreadLoader(SleepsAt(8, at=3, seconds=60), batch_size=1, worker_processes=2, multiprocessing_context=context)
    it = iter(ld)
    next(it)
    print("READY", flush=True)  # the worker processes are up: their start-up is not what is bounded
    print(" ".join(str(p.pid) for p in loader_children()), flush=True)
    if sys.argv[1] == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
"""


def test_no_child_outlives_its_parent_killed_or_exiting_mid_epoch() -> None:
    for end in ("kill", "exit"):  # SIGKILL while a batch loads; interpreter exit, loader open
        run = run_timed(PARENT, 60, args=(end,))
        assert run.returncode == (-signal.SIGKILL if end == "kill" else 0), run
        pids = [int(p) for p in run.stdout.split()]
        assert len(pids) == 2, run
        assert wait_gone(pids, 5.0) == [], f"a worker process outlived its parent ({end})"


def test_a_break_while_a_worker_thread_starts_leaves_the_next_epoch_whole() -> None:
    """The epoch closed while a worker thread of the process was starting killed the process's
    inbox reader, and the next epoch waited for ever (here: for its timeout)."""
    from tests.fixtures.slow_start import SlowStartItems

    with ThreadLoader(SlowStartItems(), batch_size=4, num_workers=3, worker_processes=1, timeout=20) as loader:
        it = iter(loader)
        assert next(it).tolist() == [0, 1, 2, 3]
        del it
        assert [b.tolist() for b in loader] == [list(range(i, i + 4)) for i in range(0, 40, 4)]
