"""Fork and exit with a loader's epoch alive: an ``os.fork()`` child that drops,
closes or exits with its parent's epoch leaves it whole; interpreter exit is bounded."""

from __future__ import annotations

import pytest

from tests.fixtures.scripts import run_timed

pytestmark = pytest.mark.usefixtures("no_child_left")

FORK = """
import gc, os, sys, time
from torch_threadloader import ThreadLoader
from tests.fixtures.datasets import AsyncSleepsAt, SleepsAt
from tests.fixtures.processes import ShardSleepsAt, running
print("READY", time.time(), flush=True)

def main():
    mode, how = sys.argv[1], sys.argv[2]
    ds = {"async": AsyncSleepsAt, "async-0": AsyncSleepsAt, "processes-iterable": ShardSleepsAt}.get(mode, SleepsAt)(16, -1, 0)
    kwargs = {"processes": {"num_workers": 1, "worker_processes": 2}, "threads": {"num_workers": 2},
              "processes-iterable": {"num_workers": 1, "worker_processes": 2},
              "async": {"num_workers": 2}, "async-0": {"num_workers": 0}}[mode]
    loader = ThreadLoader(ds, batch_size=1, **kwargs)
    it = iter(loader)
    got = [int(next(it)) for _ in range(3)]
    pids = [c.pid for c in (loader._state.kept.processes.children if loader._state.kept.processes else [])]
    pid = os.fork()
    if pid == 0:
        if how == "drop":
            del it, loader
            gc.collect()
        elif how == "close":
            it.close()
            loader.close()
        if how != "exit":
            os._exit(0)
        sys.exit(0)  # the interpreter's exit: atexit hooks run
    _, status = os.waitpid(pid, 0)
    print("CHILD", status, "ALIVE", all(running(p) for p in pids), flush=True)
    got += [int(b) for b in it]
    print("GOT", got, flush=True)
    loader.close()

main()
"""


@pytest.mark.parametrize("how", ["drop", "close", "exit"])
@pytest.mark.parametrize("mode", ["processes", "processes-iterable", "threads", "async", "async-0"])
def test_a_forked_child_leaves_its_parents_epoch_whole(mode: str, how: str) -> None:
    code = FORK.replace("sys.argv[1], sys.argv[2]", f"{mode!r}, {how!r}")
    proc = run_timed(code, 60)
    assert "CHILD 0 ALIVE True" in proc.stdout, proc
    assert f"GOT {list(range(16))}" in proc.stdout, proc


EXIT = """
import signal, sys, time
from torch_threadloader import ThreadLoader
from tests.fixtures.datasets import SleepsAt
loader = ThreadLoader(IgnoresTerm(64, 4, 600.0), batch_size=1, num_workers=1, worker_processes=1)
it = iter(loader)
next(it)
print("READY", time.time(), flush=True)  # the worker process is up: the exit is what is bounded
print("EXITING", flush=True)
"""


def test_interpreter_exit_is_bounded_when_a_worker_process_ignores_sigterm() -> None:
    code = EXIT.replace(
        "IgnoresTerm", "__import__('tests.fixtures.ignores_sigterm').fixtures.ignores_sigterm.IgnoresTerm"
    )
    proc = run_timed(code, 30)  # fails if exit hangs
    assert "EXITING" in proc.stdout, proc
