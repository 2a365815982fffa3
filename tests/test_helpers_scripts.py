"""The scripts' hang detector (``tests/helpers_scripts.py``): it counts from the READY line, so a
slow import is not a hang, and a hang fails with every thread's stack."""

from __future__ import annotations

import pytest

from tests.fixtures.scripts import run_timed


def test_the_budget_counts_from_the_ready_line_not_the_imports() -> None:
    result = run_timed('import time; time.sleep(2); print("READY", flush=True); print("done")', 1.5)
    assert result.returncode == 0 and result.lines == ["done"], result
    assert result.after_ready_s < 1.5


def test_a_script_that_outlives_its_budget_fails_with_its_threads_stacks() -> None:
    code = """
    import threading, time
    print("READY", flush=True)
    def parked():
        time.sleep(60)
    threading.Thread(target=parked, name="parked").start()
    time.sleep(60)
    """
    with pytest.raises(pytest.fail.Exception, match="still running 1s after its imports") as failed:
        run_timed(code, 1)
    assert "in parked" in str(failed.value), str(failed.value)  # faulthandler's dump of that thread


def test_a_script_that_ends_before_its_ready_line_is_returned_as_it_ended() -> None:
    result = run_timed("raise SystemExit(3)", 1)
    assert result.returncode == 3
