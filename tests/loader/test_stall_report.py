"""``stall_report_after``: a ``next()`` that has waited names what it waits for (the batch, the
samples in flight, their stage, the stacks of the threads that hold them), warns and logs once
per doubling of its wait, keeps the reports (``loader.stalls()``) and stops nothing.

Each test blocks one sample on a gate it releases itself, from a log handler, once the reports
it checks are made: no sleep decides what is seen. No test measures a time.
"""

from __future__ import annotations

import logging
import math
import pickle
import sysconfig
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import torch_threadloader as tl
from tests.fixtures.datasets import AsyncGateAt, GateAt, WaitsForFileAt
from tests.fixtures.processes import ShardWaitsForFileAt
from tests.fixtures.threads import loader_threads, wait_for_no_loader_threads
from tests.fixtures.workers import GatedStream
from torch_threadloader import LoaderStallWarning, StallReport, ThreadLoader
from torch_threadloader.stall import CALLER_WATCH_NAME, KEPT_REPORTS, LOGGER, StallLog

AFTER = 0.2  # seconds: the stall_report_after of these tests
FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
N, BATCH = 16, 4
BATCHES = [list(range(i, i + BATCH)) for i in range(0, N, BATCH)]


class ReleaseAfter(logging.Handler):
    """Calls ``open_gate()`` when ``count`` reports that ``match`` have been logged; keeps every
    report logged. (Not ``release``: that is the handler's lock.)"""

    def __init__(self, count: int, open_gate: Callable[[], None], match: Callable[[StallReport], bool]) -> None:
        super().__init__()
        self.count = count
        self.open_gate = open_gate
        self.match = match
        self.reports: list[StallReport] = []

    def emit(self, record: logging.LogRecord) -> None:
        report = record.args[0] if isinstance(record.args, tuple) else None
        assert isinstance(report, StallReport)
        self.reports.append(report)
        if sum(map(self.match, self.reports)) == self.count:
            self.open_gate()


@pytest.fixture
def handler_on_logger() -> Iterator[Callable[[ReleaseAfter], None]]:
    added: list[logging.Handler] = []

    def add(handler: ReleaseAfter) -> None:
        LOGGER.addHandler(handler)
        added.append(handler)

    yield add
    for handler in added:
        LOGGER.removeHandler(handler)


def batches_and_stalls(loader: ThreadLoader[Any]) -> tuple[list[list[int]], list[LoaderStallWarning]]:
    """One epoch's batches as lists, and the stall warnings it raised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        batches = [batch.tolist() for batch in loader]
    return batches, [w.message for w in caught if isinstance(w.message, LoaderStallWarning)]


#: A test of the stages and stacks a report reads from threads' frames: not read on a
#: free-threaded build (walking a running thread's frames is a data race there).
reads_frames = pytest.mark.skipif(FREE_THREADED, reason="a free-threaded build reads no thread's frames")


def call(name: str, index: int) -> str:
    """A dataset call as a stage names it: with its index (not read on a free-threaded build)."""
    return f"{name}()" if FREE_THREADED else f"{name}({index})"


def of_batch(position: int) -> Callable[[StallReport], bool]:
    return lambda report: report.batch == position


def stack_of_getitem(report: StallReport) -> str:
    """The stack (of any thread in the report) that is in a dataset's ``__getitem__``."""
    return next(str(s) for s in report.stacks if "in __getitem__" in str(s))


def check_schedule(reports: list[StallReport]) -> None:
    """Reports of one next() are numbered 1, 2, ...; report n after AFTER * 2**(n-1) seconds."""
    assert [r.number for r in reports] == list(range(1, len(reports) + 1))
    for report in reports:
        assert report.waited_s >= AFTER * 2 ** (report.number - 1)


# -- map-style, in threads -------------------------------------------------------------------


@reads_frames
@pytest.mark.parametrize("item_concurrency", [1, 2])
@pytest.mark.parametrize("in_order", [True, False])
def test_thread_workers_name_batch_sample_stage_and_stack(handler_on_logger, in_order, item_concurrency):
    ds = GateAt(N, {5})
    handler = ReleaseAfter(2, ds.gate.set, of_batch(1))
    handler_on_logger(handler)
    loader = ThreadLoader(
        ds,
        batch_size=BATCH,
        num_workers=2,
        in_order=in_order,
        stall_report_after=AFTER,
        item_concurrency=item_concurrency,
    )
    batches, warned = batches_and_stalls(loader)
    assert sorted(batches) == BATCHES
    reports = loader.stalls()
    assert [w.report for w in warned] == reports == handler.reports
    check_schedule(reports)
    report = reports[0]
    assert report.batch == 1 and report.indices == (4, 5, 6, 7)
    blocked = next(e for e in report.in_flight if e.position == 1)
    assert blocked.indices == (4, 5, 6, 7)
    assert blocked.thread is not None and blocked.age_s >= AFTER
    assert blocked.worker == 1  # batch 1's worker, also where a thread per batch loads it
    text = str(report)
    assert "batch 1 of the epoch (sample indices [4, 5, 6, 7])" in text
    if item_concurrency > 1:  # the batch's thread waits for its items, which run on the item threads
        assert blocked.stage == "running"
        return
    assert blocked.stage == call("GateAt.__getitem__", 5)
    assert "self.gate.wait()" in stack_of_getitem(report)
    assert call("GateAt.__getitem__", 5) in text and "self.gate.wait()" in text


@reads_frames
def test_a_blocked_collate_fn_is_the_stage(handler_on_logger):
    gate = threading.Event()

    def waiting_collate(samples: list[int]) -> list[int]:
        if 5 in samples:
            gate.wait()
        return samples

    handler_on_logger(ReleaseAfter(1, gate.set, of_batch(1)))
    loader = ThreadLoader(
        GateAt(N, set()), batch_size=BATCH, num_workers=2, collate_fn=waiting_collate, stall_report_after=AFTER
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LoaderStallWarning)
        assert list(loader) == BATCHES
    blocked = next(e for e in loader.stalls()[0].in_flight if e.position == 1)
    assert blocked.stage == "collate"


def test_a_batch_behind_the_blocked_one_is_queued_behind_it(handler_on_logger):
    """Batch 3 goes to worker 1 too (batch i to worker i % 2): it waits behind batch 1."""
    ds = GateAt(N, {5})
    handler_on_logger(ReleaseAfter(1, ds.gate.set, of_batch(1)))
    loader = ThreadLoader(ds, batch_size=BATCH, num_workers=2, stall_report_after=AFTER)
    assert batches_and_stalls(loader)[0] == BATCHES
    entries = {e.position: e for e in loader.stalls()[0].in_flight}
    assert entries[3].stage == "queued behind #1" and entries[3].thread is None


# -- no workers: the caller's thread loads, a thread of the epoch's watches -------------------


@reads_frames
def test_without_workers_the_callers_own_stack_is_reported(handler_on_logger):
    ds = GateAt(N, {5})
    handler_on_logger(ReleaseAfter(2, ds.gate.set, of_batch(1)))
    loader = ThreadLoader(ds, batch_size=BATCH, stall_report_after=AFTER)
    batches, warned = batches_and_stalls(loader)
    assert batches == BATCHES
    reports = loader.stalls()
    assert [w.report for w in warned] == reports
    check_schedule(reports)
    report = reports[0]
    assert report.batch == 1
    (blocked,) = report.in_flight
    assert blocked.stage == call("GateAt.__getitem__", 5) and blocked.thread == threading.current_thread().name
    assert "self.gate.wait()" in stack_of_getitem(report)
    assert CALLER_WATCH_NAME not in loader_threads()  # the epoch ended: its watching thread too


@pytest.mark.parametrize(
    "make", [pytest.param(GateAt, marks=reads_frames, id="sync"), pytest.param(AsyncGateAt, id="async")]
)
def test_without_workers_a_report_names_the_samples_of_the_batch_awaited(handler_on_logger, make):
    """The caller's thread loads batch 1 (samples 4 to 7) and waits in sample 5: the report and
    its one unit in flight name the batch's sample indices, as with workers."""
    ds = make(N, {5})
    handler_on_logger(ReleaseAfter(1, ds.gate.set, of_batch(1)))
    loader = ThreadLoader(ds, batch_size=BATCH, num_workers=0, stall_report_after=AFTER)
    assert batches_and_stalls(loader)[0] == BATCHES
    report = loader.stalls()[0]
    assert report.batch == 1 and report.indices == (4, 5, 6, 7)
    blocked = next(e for e in report.in_flight if e.position == 1)
    assert blocked.indices == (4, 5, 6, 7)
    assert "(sample indices [4, 5, 6, 7])" in str(report)


@reads_frames
def test_without_workers_an_iterable_dataset_is_reported(handler_on_logger):
    """It blocks in its generator's first ``next()`` (``iter()`` runs in ``iter(loader)``, as torch's)."""
    ds = GatedStream(N, block_in="next")
    handler_on_logger(ReleaseAfter(1, ds.gate.set, of_batch(0)))
    loader = ThreadLoader(ds, batch_size=BATCH, stall_report_after=AFTER)
    assert batches_and_stalls(loader)[0] == BATCHES
    (blocked,) = loader.stalls()[0].in_flight
    assert blocked.stage == "GatedStream._generate"


def test_the_watching_thread_runs_only_while_the_caller_iterates(handler_on_logger):
    """Without workers the epoch's one thread, the watch, starts with a ``next()`` and leaves
    once none runs (an epoch kept but not pulled holds no thread); the next ``next()`` starts it
    again, and a stall then is reported. With reports off there is none."""
    ds = GateAt(N, {5})
    loader = ThreadLoader(ds, batch_size=BATCH, stall_report_after=AFTER)
    it = iter(loader)
    assert loader_threads() == []
    assert next(it).tolist() == BATCHES[0]
    assert wait_for_no_loader_threads() == []  # idle: it left
    handler_on_logger(ReleaseAfter(1, ds.gate.set, of_batch(1)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LoaderStallWarning)
        assert [b.tolist() for b in it] == BATCHES[1:]
    assert [r.batch for r in loader.stalls()][:1] == [1]
    loader.stall_report_after = None
    it = iter(loader)
    assert [b.tolist() for b in it] == BATCHES and loader_threads() == []


# -- async, iterable, stragglers, worker processes -----------------------------------------


@reads_frames
@pytest.mark.parametrize("num_workers", [0, 2])
def test_async_dataset_names_the_awaited_call(handler_on_logger, num_workers):
    ds = AsyncGateAt(N, {5})
    handler = ReleaseAfter(2, ds.gate.set, of_batch(1))
    handler_on_logger(handler)
    loader = ThreadLoader(ds, batch_size=BATCH, num_workers=num_workers, stall_report_after=AFTER)
    batches, warned = batches_and_stalls(loader)
    assert batches == BATCHES
    reports = loader.stalls()
    assert [w.report for w in warned] == reports
    check_schedule(reports)
    report = reports[0]
    assert report.batch == 1 and report.indices == (4, 5, 6, 7)
    blocked = next(e for e in report.in_flight if e.position == 1)
    assert blocked.stage.startswith(f"awaiting {call('AsyncGateAt.__getitem__', 5)} -> sleep"), blocked.stage
    assert report.stacks  # the loop thread's


@reads_frames
def test_iterable_dataset_names_the_blocked_iterator(handler_on_logger):
    """Worker 0 blocks in ``__iter__``: the epoch's first batch waits; worker 1's batch is ready."""
    ds = GatedStream(N)
    handler_on_logger(ReleaseAfter(2, ds.gate.set, of_batch(0)))
    loader = ThreadLoader(ds, batch_size=BATCH, num_workers=2, stall_report_after=AFTER)
    batches, _ = batches_and_stalls(loader)
    assert sorted(i for batch in batches for i in batch) == list(range(N))
    reports = loader.stalls()
    check_schedule(reports)
    report = reports[0]
    assert report.batch == 0 and report.indices is None  # an IterableDataset's batches have no indices
    blocked = next(e for e in report.in_flight if e.position == 0)
    assert blocked.stage == "GatedStream.__iter__()" and blocked.worker == 0
    assert any("self.gate.wait()" in str(s) for s in report.stacks)


@reads_frames
def test_defer_stragglers_names_the_straggling_sample(handler_on_logger):
    """Batches are cut from the samples that finish: the next() waits for sample 5 alone."""
    ds = GateAt(N, {5})
    handler = ReleaseAfter(2, ds.gate.set, lambda report: True)
    handler_on_logger(handler)
    loader = ThreadLoader(ds, batch_size=BATCH, num_workers=2, defer_stragglers=True, stall_report_after=AFTER)
    batches, warned = batches_and_stalls(loader)
    assert sorted(i for batch in batches for i in batch) == list(range(N))
    reports = loader.stalls()
    assert len(warned) == len(reports) >= 2
    report = reports[0]
    assert report.batch is None  # which batch sample 5 goes into is not known yet
    blocked = next(e for e in report.in_flight if e.indices == (5,))
    assert blocked.stage == call("GateAt.__getitem__", 5)
    assert "self.gate.wait()" in stack_of_getitem(report)


@reads_frames
def test_worker_processes_name_the_child_and_send_its_stack(handler_on_logger, tmp_path: Path):
    """The child holding batch 1 is named, and asked for its threads' stacks over its pipe: the
    stage is its thread's ``__getitem__(5)``, and that thread's stack is in the report."""
    release = tmp_path / "release"
    ds = WaitsForFileAt(N, at=5, path=str(release))
    handler_on_logger(ReleaseAfter(1, release.touch, of_batch(1)))
    loader = ThreadLoader(ds, batch_size=BATCH, num_workers=1, worker_processes=2, stall_report_after=AFTER)
    assert batches_and_stalls(loader)[0] == BATCHES
    report = next(r for r in loader.stalls() if r.batch == 1)
    assert report.indices == (4, 5, 6, 7)
    blocked = next(e for e in report.in_flight if e.position == 1)
    assert blocked.worker == 1 and blocked.thread is not None and "pid" in blocked.thread
    assert blocked.stage.startswith(f"in a worker process: {call('WaitsForFileAt.__getitem__', 5)} on "), blocked.stage
    stack = stack_of_getitem(report)
    assert stack.startswith(f'Thread "{blocked.thread}: ') and "time.sleep(0.01)" in stack


@reads_frames
def test_worker_processes_with_an_iterable_dataset_send_their_stacks(handler_on_logger, tmp_path: Path):
    """The stream blocks at item 4 in the child that yields it: the next() waiting on it is
    reported with that child's thread in ``__iter__``, and its stack, sent over the pipe."""
    release = tmp_path / "release"
    ds = ShardWaitsForFileAt(N, at=4, path=str(release))
    handler = ReleaseAfter(1, release.touch, lambda report: any("time.sleep(0.01)" in str(s) for s in report.stacks))
    handler_on_logger(handler)
    loader = ThreadLoader(ds, batch_size=2, num_workers=1, worker_processes=2, stall_report_after=AFTER)
    batches, _ = batches_and_stalls(loader)
    assert sorted(i for batch in batches for i in batch) == list(range(N))
    report = next(r for r in handler.reports if any("time.sleep(0.01)" in str(s) for s in r.stacks))
    assert any(
        e.stage.startswith("in the worker processes: ShardWaitsForFileAt.__iter__() on ") for e in report.in_flight
    )


# -- off, timeout, checks, bounds ------------------------------------------------------------


def test_none_turns_it_off(handler_on_logger):
    """With reports off, a next() that waits several report intervals (until its timeout) reports nothing."""
    ds = GateAt(N, {5})
    handler = ReleaseAfter(1, ds.gate.set, lambda report: True)
    handler_on_logger(handler)
    loader = ThreadLoader(ds, batch_size=BATCH, num_workers=2, timeout=4 * AFTER, stall_report_after=None)
    it = iter(loader)
    assert next(it).tolist() == BATCHES[0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(tl.LoaderTimeoutError):
            next(it)
    ds.gate.set()
    assert [b.tolist() for b in it] == BATCHES[1:]
    assert loader.stalls() == [] and handler.reports == [] and caught == []


def test_a_shorter_timeout_wins_and_raises_as_before(handler_on_logger):
    ds = GateAt(N, {5})
    loader = ThreadLoader(ds, batch_size=BATCH, num_workers=2, timeout=AFTER, stall_report_after=10 * AFTER)
    it = iter(loader)
    assert next(it).tolist() == BATCHES[0]
    with pytest.raises(tl.LoaderTimeoutError, match="batch 1"):
        next(it)
    ds.gate.set()
    assert [b.tolist() for b in it] == BATCHES[1:]
    assert loader.stalls() == []


def test_reports_then_the_timeout_raises(handler_on_logger):
    ds = GateAt(N, {5})
    loader = ThreadLoader(ds, batch_size=BATCH, num_workers=2, timeout=5 * AFTER, stall_report_after=AFTER)
    it = iter(loader)
    assert next(it).tolist() == BATCHES[0]
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        with pytest.raises(tl.LoaderTimeoutError, match="batch 1"):
            next(it)
    ds.gate.set()
    assert [b.tolist() for b in it] == BATCHES[1:]
    reports = loader.stalls()
    assert [r.number for r in reports] == [1, 2, 3]  # at 1, 2 and 4 times AFTER, then the timeout at 5
    assert all(r.batch == 1 for r in reports)


@pytest.mark.parametrize("bad", [0, -1, math.nan, math.inf, True, "5", [1]])
def test_a_bad_value_is_refused_naming_the_argument(bad):
    with pytest.raises((TypeError, ValueError), match="stall_report_after"):
        ThreadLoader(GateAt(4, set()), stall_report_after=bad)
    loader = ThreadLoader(GateAt(4, set()))
    with pytest.raises((TypeError, ValueError), match="stall_report_after"):
        loader.stall_report_after = bad
    assert loader.stall_report_after == 300


def test_the_default_is_five_minutes_and_a_setting_set_later_is_used(handler_on_logger):
    ds = GateAt(N, {5})
    loader = ThreadLoader(ds, batch_size=BATCH, num_workers=2)
    assert loader.stall_report_after == 300
    loader.stall_report_after = AFTER  # used from the next iter(), as torch's settings are
    handler_on_logger(ReleaseAfter(1, ds.gate.set, of_batch(1)))
    assert batches_and_stalls(loader)[0] == BATCHES
    assert loader.stalls()[0].batch == 1


def test_the_loader_keeps_the_newest_reports():
    log = StallLog()
    made = [StallReport(float(i), 1, i, None, (), ()) for i in range(KEPT_REPORTS + 5)]
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        for report in made:
            log.add(report)
    assert log.reports() == made[-KEPT_REPORTS:]


def test_the_warning_pickles_as_its_message():
    report = StallReport(1.0, 1, 2, (4, 5), (), ())
    warning = LoaderStallWarning(report)
    again = pickle.loads(pickle.dumps(warning))
    assert str(again) == str(warning) == str(report) and again.report is None
    assert warning.report is report


def test_a_report_names_only_threads_that_hold_work(handler_on_logger):
    """Worker 0 is idle while worker 1 holds batch 1: only worker 1's stack is in the report."""
    ds = GateAt(N, {5})
    handler_on_logger(ReleaseAfter(1, ds.gate.set, of_batch(1)))
    loader = ThreadLoader(ds, batch_size=BATCH, num_workers=2, prefetch_factor=1, stall_report_after=AFTER)
    assert batches_and_stalls(loader)[0] == BATCHES
    report = loader.stalls()[0]
    holders = {e.thread for e in report.in_flight if e.thread is not None}
    assert {s.thread for s in report.stacks} == holders
    assert threading.current_thread().name not in holders
