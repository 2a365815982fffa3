"""One error contract in every mode: threads (``num_workers`` 0 and > 0), async
datasets, ``IterableDataset``, ``datapipes`` node graphs and worker processes raise the same
errors for the same events:

* a timeout is :class:`LoaderTimeoutError` with torch's words, and survives ``pickle`` and
  ``copy`` (also raised in a child process and sent to its parent);
* ``close()`` of the loader or of the epoch from another thread makes a waiting ``next()``
  raise :class:`~datapipes.EpochClosedError`, never end as if the epoch were complete;
* ``SystemExit`` and ``KeyboardInterrupt`` raised by a dataset come out of ``next()`` as
  themselves, and the loader's threads still close cleanly;
* a lost worker is one error type, :class:`~datapipes.WorkerLostError`, naming it;
* Ctrl-C interrupts a ``next()`` that waits, even when the signal reaches another thread.

The fixture datasets are module-level classes: worker processes import them.
"""

from __future__ import annotations

import asyncio
import copy
import multiprocessing
import pickle
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from torch.utils.data import Dataset

import datapipes as dp
from tests.fixtures.datasets import (
    AsyncWaitsForFileAt,
    FileGate,
    StreamWaitsForFileAt,
    WaitsForFileAt,
)
from tests.fixtures.scripts import IMPORT_ALLOWANCE_S, run_timed
from tests.fixtures.threads import WaitingConsumer
from torch_threadloader import LoaderTimeoutError, ThreadLoader, WorkerProcessError

pytestmark = pytest.mark.usefixtures("no_child_left")

N = 8
SLOW = 2  # the item that waits at the test's gate (a FileGate) until the test opens it


class AsyncRaisesAt(Dataset[int]):
    """``await ds[i] == i``, but index ``at`` raises ``exc_type()`` (after awaiting)."""

    def __init__(self, n: int, at: int, exc_type: type[BaseException]) -> None:
        self.n = n
        self.at = at
        self.exc_type = exc_type

    def __len__(self) -> int:
        return self.n

    async def __getitem__(self, i: int) -> int:
        await asyncio.sleep(0.001 * (i % 3))
        if i == self.at:
            raise self.exc_type(f"raised by item {i}")
        return i


def _map(gate: FileGate) -> WaitsForFileAt:
    return WaitsForFileAt(N, SLOW, gate.release, gate.started)


def _async(gate: FileGate) -> AsyncWaitsForFileAt:
    return AsyncWaitsForFileAt(N, SLOW, gate.release, gate.started)


def _stream(gate: FileGate) -> StreamWaitsForFileAt:
    return StreamWaitsForFileAt(N, SLOW, gate.release, gate.started)


#: mode -> (dataset, loader arguments) for a gate: item SLOW waits at it until the test opens it
#: (a slow item whose time does not run out while the epoch starts, however loaded the machine).
Mode = Callable[[FileGate], tuple[Any, dict[str, Any]]]
MODES: dict[str, Mode] = {
    "map-0": lambda gate: (_map(gate), {"num_workers": 0}),
    "map-2": lambda gate: (_map(gate), {"num_workers": 2}),
    "map-items-2": lambda gate: (_map(gate), {"num_workers": 2, "item_concurrency": 2}),
    "iterable-2": lambda gate: (_stream(gate), {"num_workers": 2}),
    "async-0": lambda gate: (_async(gate), {"num_workers": 0}),
    "async-2": lambda gate: (_async(gate), {"num_workers": 2}),
    "node-0": lambda gate: (dp.ThreadMapper(range(N), _map(gate).__getitem__, num_threads=2), {"num_workers": 0}),
    "node-2": lambda gate: (dp.IterableWrapper(_stream(gate)), {"num_workers": 2}),
    "processes-1": lambda gate: (_map(gate), {"num_workers": 1, "worker_processes": 1}),
    "processes-2": lambda gate: (_map(gate), {"num_workers": 1, "worker_processes": 2}),
    "processes-iterable": lambda gate: (_stream(gate), {"num_workers": 1, "worker_processes": 1}),
    "processes-async": lambda gate: (_async(gate), {"num_workers": 1, "worker_processes": 1}),
}
#: Where ``timeout`` applies (torch refuses it without workers).
TIMED = [m for m in MODES if not m.endswith("-0")]


@pytest.fixture
def gate(tmp_path: Path) -> Iterator[FileGate]:
    """The gate item SLOW waits at; opened after the test whatever happened, so that no
    thread or worker process of the test stays stuck at it."""
    gate = FileGate(tmp_path)
    yield gate
    gate.open()


def _gated_loader(mode: str, gate: FileGate, **extra: Any) -> ThreadLoader[Any]:
    dataset, kwargs = MODES[mode](gate)
    return ThreadLoader(dataset, batch_size=1, **kwargs, **extra)


# -- a timeout --------------------------------------------------------------------------------


def _roundtrips(exc: LoaderTimeoutError) -> list[BaseException]:
    return [pickle.loads(pickle.dumps(exc)), copy.copy(exc), copy.deepcopy(exc)]


@pytest.mark.parametrize("mode", TIMED)  # no short test timeout: worker processes may take minutes to start under load
def test_a_timeout_is_loader_timeout_error_with_torchs_words_in_every_mode(mode: str, gate: FileGate) -> None:
    loader = _gated_loader(mode, gate, timeout=0.2)
    try:
        with pytest.raises(LoaderTimeoutError) as info:
            for _ in loader:
                pass
    finally:
        gate.open()  # the close below need not wait for the stuck item's time to run out
        loader.close()
    exc = info.value
    assert isinstance(exc, RuntimeError) and isinstance(exc, TimeoutError)
    assert str(exc).startswith("DataLoader timed out after 0.2 seconds"), str(exc)
    assert exc.timeout == 0.2
    for again in _roundtrips(exc):
        assert type(again) is LoaderTimeoutError
        assert str(again) == str(exc)
        assert (again.timeout, again.batch, again.indices) == (exc.timeout, exc.batch, exc.indices)


def test_loader_timeout_error_survives_pickle_and_copy() -> None:
    exc = LoaderTimeoutError(1.5, 3, [6, 7])
    assert str(exc) == "DataLoader timed out after 1.5 seconds waiting for batch 3 (indices [6, 7])"
    for again in _roundtrips(exc):
        assert type(again) is LoaderTimeoutError and str(again) == str(exc)
        assert (again.timeout, again.batch, again.indices) == (1.5, 3, [6, 7])


def test_the_nodes_errors_survive_pickle() -> None:
    errors: list[BaseException] = [
        dp.NodeTimeoutError("node", 4, (4, [8, 9]), 0.5),
        dp.EpochClosedError("closed"),
        dp.WorkerLostError("worker process 1 (pid 7) was killed by SIGKILL", worker="worker process 1"),
        WorkerProcessError("worker process 0 was killed", process=0, pid=12, exitcode=-9),
    ]
    for exc in errors:
        again = pickle.loads(pickle.dumps(exc))
        assert type(again) is type(exc) and str(again) == str(exc)
        assert vars(again) == vars(exc)


def _time_out_in_a_child(conn: Any, folder: str) -> None:
    conn.send("ready")  # imports done (torch's): what follows is what the test bounds
    gate = FileGate(folder)
    loader = ThreadLoader(_map(gate), batch_size=1, num_workers=2, timeout=0.2)
    try:
        for _ in loader:
            pass
        conn.send(None)
    except Exception as exc:  # sent to the parent as it is, as torch's own test_timeout does
        conn.send(exc)
    finally:
        gate.open()
        loader.close()
        conn.close()


def test_a_timeout_raised_in_a_child_process_reaches_the_parent_as_itself(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    here, there = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_time_out_in_a_child, args=(there, str(tmp_path)))
    child.start()
    there.close()
    try:
        # A spawned child imports torch first: minutes on a loaded machine, not a hang of ours.
        assert here.poll(IMPORT_ALLOWANCE_S) and here.recv() == "ready", "the child never started"
        assert here.poll(90), "the child sent nothing after its imports"
        exc = here.recv()
    finally:
        child.join(30)
    assert type(exc) is LoaderTimeoutError, repr(exc)
    assert str(exc).startswith("DataLoader timed out after 0.2 seconds waiting for batch 2"), str(exc)


# -- close() from another thread --------------------------------------------------------------


# No short test timeout: worker processes may take minutes to start on a loaded machine.
@pytest.mark.parametrize("closer", ["loader", "epoch"])
@pytest.mark.parametrize("mode", list(MODES))
def test_close_from_another_thread_makes_a_waiting_next_raise_epoch_closed(
    mode: str, closer: str, gate: FileGate
) -> None:
    """The main thread is in ``next()`` for the batch stuck at the gate when another thread
    closes the loader or the epoch: ``next()`` raises EpochClosedError, never ends the epoch
    short."""
    loader = _gated_loader(mode, gate)
    it = iter(loader)
    got = [int(next(it)) for _ in range(SLOW)]
    consumer = WaitingConsumer()
    seen_waiting: list[bool] = []
    closer_thread = threading.Thread(
        target=lambda: seen_waiting.append(
            consumer.close_while_waiting(gate, (loader if closer == "loader" else it).close)
        )
    )
    closer_thread.start()
    opener = consumer.open_once_settled(gate)
    try:
        with pytest.raises(dp.EpochClosedError):
            consumer.starts_next()
            for batch in it:
                got.append(int(batch))
    finally:
        consumer.settled.set()
        closer_thread.join()
        opener.join()
        loader.close()
    assert seen_waiting == [True], "the main thread was not seen waiting in next() before the close"
    assert SLOW not in got[SLOW:], got  # the stuck item never came out: closed under it


def _close_in_another_thread(closable: Any) -> None:
    """``closable.close()`` (a loader or an epoch) on another thread, waited for."""
    closer = threading.Thread(target=closable.close)
    closer.start()
    closer.join()


@pytest.mark.parametrize("when", ["before", "after"])  # the default bound: the first may start the forkserver
@pytest.mark.parametrize("mode", list(MODES))
def test_a_loader_closed_by_another_thread_while_iter_opens_the_graph_leaves_it_closed(
    mode: str, when: str, monkeypatch: pytest.MonkeyPatch, gate: FileGate
) -> None:
    """``loader.close()`` from another thread while ``iter(loader)`` is still opening the
    epoch's graph (before or after the graph's own ``open()``) closes that epoch: iterating it
    raises EpochClosedError, and none of its threads or worker processes runs on. Found in
    review: the close saw no graph yet, and the graph opened after it ran the whole epoch."""
    from tests.fixtures.processes import loader_children
    from tests.fixtures.threads import wait_for_no_loader_threads
    from torch_threadloader.epoch import epoch as epoch_module

    gate.open()  # no item is stuck here: the epoch is closed before it starts
    loader = _gated_loader(mode, gate)
    build = epoch_module._build

    def build_then_close_in_open(*args: Any) -> dp.Node[Any]:
        graph = build(*args)
        open_graph = graph.open

        def open_closing() -> dp.NodeIterator[Any]:
            if when == "before":
                _close_in_another_thread(loader)
            it = open_graph()
            if when == "after":
                _close_in_another_thread(loader)
            return it

        graph.open = open_closing  # type: ignore[method-assign]
        return graph

    monkeypatch.setattr(epoch_module, "_build", build_then_close_in_open)
    got: list[int] = []
    try:
        with pytest.raises(dp.EpochClosedError):
            for batch in loader:  # iter() opens (and the other thread closes), then next()
                got.append(int(batch))
        assert got == []
        # While the loader (and the graph it last built) is alive: nothing of the epoch runs.
        assert wait_for_no_loader_threads() == []
        assert [p.pid for p in loader_children() if p.is_alive()] == []
        monkeypatch.undo()
        assert {int(b) for b in loader} == set(range(N))  # the loader works on afterwards
    finally:
        loader.close()


@pytest.mark.parametrize("closer", ["this thread", "another thread"])
@pytest.mark.parametrize(
    "mode", ["map-0", "map-2", "map-items-2", "async-0", "async-2", "processes-1", "processes-iterable"]
)
def test_next_after_a_close_between_calls(mode: str, closer: str, gate: FileGate) -> None:
    """A close between two ``next()`` calls: from this thread, the next ``next()`` ends the
    epoch (``StopIteration``, as a closed generator); from another thread, it raises
    EpochClosedError once (a loop must not end as if the epoch were complete), then ends."""
    gate.open()  # no item is stuck here: the close comes between two calls
    loader = _gated_loader(mode, gate)
    try:
        it = iter(loader)
        next(it)
        if closer == "this thread":
            it.close()
        else:
            _close_in_another_thread(it)
            with pytest.raises(dp.EpochClosedError, match="between next"):
                next(it)
        with pytest.raises(StopIteration):
            next(it)
    finally:
        loader.close()


# -- SystemExit and KeyboardInterrupt from an async dataset -----------------------------------

ASYNC_SHAPES = {
    "workers-0": {"num_workers": 0},
    "workers-2": {"num_workers": 2},
    "workers-2-batch-4-in-turn": {"num_workers": 2, "batch_size": 4},  # item_concurrency=1: one task
    "workers-0-batch-4": {"num_workers": 0, "batch_size": 4, "item_concurrency": 2},
    "workers-2-batch-4": {"num_workers": 2, "batch_size": 4, "item_concurrency": 2},
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("exc_type", [SystemExit, KeyboardInterrupt])
@pytest.mark.parametrize("shape", list(ASYNC_SHAPES))
def test_base_exceptions_of_an_async_dataset_come_out_of_next_as_themselves(
    shape: str, exc_type: type[BaseException], recwarn: pytest.WarningsRecorder
) -> None:
    kwargs = {"batch_size": 1, **ASYNC_SHAPES[shape]}
    loader = ThreadLoader(AsyncRaisesAt(16, 5, exc_type), **kwargs)
    try:
        with pytest.raises(exc_type, match="raised by item 5"):
            for _ in loader:
                pass
        # The loader's loop lived on (or was replaced): the next epoch runs, then closes.
        loader.dataset.at = -1
        assert len(list(loader)) == len(loader)
    finally:
        loader.close()
    died = [str(w.message) for w in recwarn if "escaped its loop" in str(w.message)]
    assert died == [], died


# -- a lost worker ----------------------------------------------------------------------------


@pytest.mark.parametrize("dataset", ["map", "iterable"])
def test_a_lost_worker_process_is_a_worker_lost_error_naming_it(dataset: str) -> None:
    from tests.fixtures.processes import DiesAt, StreamDiesAt

    dies = DiesAt(8, 2, "kill") if dataset == "map" else StreamDiesAt(8, 2, "kill")
    loader = ThreadLoader(dies, batch_size=1, num_workers=1, worker_processes=1)
    try:
        with pytest.raises(dp.WorkerLostError, match=r"worker process 0 \(pid \d+.*SIGKILL") as info:
            list(loader)
    finally:
        loader.close()
    assert isinstance(info.value, WorkerProcessError)
    assert info.value.worker.startswith("worker process 0")
    assert (info.value.process, info.value.exitcode) == (0, -9)


@pytest.mark.timeout(120)
def test_an_event_loop_closed_under_a_running_epoch_is_a_worker_lost_error_naming_it(gate: FileGate) -> None:
    loop = dp.EventLoopThread("lost-loop")
    stuck = AsyncWaitsForFileAt(4, 0, gate.release, gate.started)
    fetcher = dp.AsyncFetcher(range(4), stuck.__getitem__, loop=loop, max_concurrency=2)
    it = iter(fetcher)
    consumer = WaitingConsumer()
    closer = threading.Thread(
        target=consumer.close_while_waiting, args=(gate, lambda: loop.close(timeout=1.0, warn=False))
    )
    closer.start()
    try:
        with pytest.raises(dp.WorkerLostError, match="lost-loop") as info:
            consumer.starts_next()
            next(it)
        assert info.value.worker == "lost-loop"
    finally:
        gate.open()
        closer.join()
        it.close()
        loop.close()


# -- Ctrl-C reaches a waiting next() whichever thread the signal lands on ----------------------

CTRL_C_ELSEWHERE = """
import os, signal, sys, threading
from torch_threadloader import ThreadLoader
from tests.fixtures.datasets import AsyncWaitsForFileAt, FileGate, StreamWaitsForFileAt, WaitsForFileAt
from tests.fixtures.threads import wait_until_blocked
mode, gate = sys.argv[1], FileGate(sys.argv[2])
kind = {"async": AsyncWaitsForFileAt, "iterable": StreamWaitsForFileAt, "processes-iterable": StreamWaitsForFileAt}
ds = kind.get(mode, WaitsForFileAt)(8, 0, gate.release, gate.started)
kwargs = {"num_workers": 1, "worker_processes": 2} if mode.startswith("processes") else {"num_workers": 2}
it = iter(ThreadLoader(ds, batch_size=1, **kwargs))
print("READY", flush=True)  # after iter(): starting worker processes (their imports) is start-up
main = threading.get_native_id()

def interrupt_the_waiting_next():
    gate.wait_stuck(600)
    wait_until_blocked(main)
    os.kill(os.getpid(), signal.SIGINT)

killer = threading.Thread(target=interrupt_the_waiting_next, daemon=True)
killer.start()  # started before the mask below: it, or a loader thread, takes the signal
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
try:
    next(it)
except KeyboardInterrupt:
    print("interrupted", flush=True)
finally:
    gate.open()  # the stuck item returns: the exit need not wait for it
"""


@pytest.mark.parametrize("mode", ["threads", "async", "iterable", "processes", "processes-iterable"])
def test_ctrl_c_raises_in_a_waiting_next_when_another_thread_takes_the_signal(mode: str, tmp_path: Path) -> None:
    # The kernel gives a process's signal to any thread that does not block it; Python runs
    # the handler on the main thread only when that thread next runs bytecode. Seen on 3.13t
    # under load: the main thread parked in a wait with no timeout, Ctrl-C never raised. The
    # mask makes that schedule certain; the consumer's waits are sliced, so it raises.
    result = run_timed(CTRL_C_ELSEWHERE, 60, args=(mode, str(tmp_path)))
    assert result.returncode == 0, result
    assert result.lines == ["interrupted"], result


STRAGGLER_MODES: dict[str, Mode] = {
    "stragglers-map-2": lambda gate: (_map(gate), {"num_workers": 2, "defer_stragglers": True}),
    "stragglers-async-0": lambda gate: (_async(gate), {"num_workers": 0, "defer_stragglers": True}),
    "stragglers-async-2": lambda gate: (_async(gate), {"num_workers": 2, "defer_stragglers": True}),
}
EVERY_MODE = {**MODES, **STRAGGLER_MODES}


# No short test timeout: worker processes may take minutes to start on a loaded machine.
@pytest.mark.parametrize("closer", ["loader", "epoch"])
@pytest.mark.parametrize("mode", list(EVERY_MODE))
def test_a_close_from_the_thread_that_called_iter_raises_in_a_consumer_in_another_thread(
    mode: str, closer: str, gate: FileGate
) -> None:
    """``iter()`` in this thread, the batches taken in another, the close from this thread
    while the other waits for the batch stuck at the gate: its ``next()`` raises
    EpochClosedError, whoever called ``iter()`` (the loop used to end as if the epoch were
    complete)."""
    dataset, kwargs = EVERY_MODE[mode](gate)
    batch_size = 4 if "stragglers" in mode else 1
    loader = ThreadLoader(dataset, batch_size=batch_size, **kwargs)
    it = iter(loader)
    got: list[int] = []
    sizes: list[int] = []
    outcome: list[BaseException] = []
    consumer = WaitingConsumer()

    def consume() -> None:
        consumer.starts_next()
        try:
            for batch in it:
                got.extend(int(x) for x in batch.reshape(-1))
                sizes.append(batch.numel())
            outcome.append(StopIteration())
        except BaseException as exc:
            outcome.append(exc)
        finally:
            consumer.settled.set()

    consumer_thread = threading.Thread(target=consume)
    consumer_thread.start()
    opener = consumer.open_once_settled(gate)
    try:
        seen_waiting = consumer.close_while_waiting(gate, (loader if closer == "loader" else it).close)
        consumer_thread.join(30)
        assert not consumer_thread.is_alive()
    finally:
        consumer.settled.set()
        opener.join()
        loader.close()
        consumer_thread.join()
    assert seen_waiting, "the consumer was not seen waiting in next() before the close"
    assert len(outcome) == 1 and isinstance(outcome[0], dp.EpochClosedError), (outcome, got)
    assert SLOW not in got and len(got) < N, got
    assert all(size == batch_size for size in sizes), sizes  # no partial batch handed out as delivered


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", list(STRAGGLER_MODES))
def test_in_straggler_mode_timeout_bounds_the_next_call_not_each_sample(mode: str) -> None:
    """``timeout`` is the longest one ``next()`` waits, as torch's: with samples that each take
    longer than half the timeout, a batch of several of them still raises at about the
    timeout, not at ``batch_size`` times it."""
    if mode.endswith("-0"):
        pytest.skip("torch refuses timeout without workers")
    slow = SleepsAll(8, 0.6) if "map" in mode else AsyncSleepsAll(8, 0.6)
    loader = ThreadLoader(slow, batch_size=8, num_workers=1, defer_stragglers=True, timeout=1.0)
    try:
        it = iter(loader)
        start = time.monotonic()
        with pytest.raises(LoaderTimeoutError):
            next(it)
        waited = time.monotonic() - start
    finally:
        loader.close()
    assert waited < 2.5, f"next() waited {waited:.1f} s with timeout=1"  # 8 samples x 0.6 s would be 4.8 s


class SleepsAll(Dataset[int]):
    """Every item takes ``seconds``."""

    def __init__(self, n: int, seconds: float) -> None:
        self.n, self.seconds = n, seconds

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        time.sleep(self.seconds)
        return i


class AsyncSleepsAll(SleepsAll):
    async def __getitem__(self, i: int) -> int:  # type: ignore[override]
        await asyncio.sleep(self.seconds)
        return i
