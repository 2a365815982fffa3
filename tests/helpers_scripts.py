"""Running a test's script in a fresh interpreter, with a hang detector that starts after the
script's imports (importing torch takes 2 s on a quiet machine and up to a minute on a loaded
free-threaded build, which is not a hang of ours).

A script prints a line starting with ``READY`` once its imports are done
(``print("READY", flush=True)``); its budget counts
from that line. A script still running when its budget is spent gets ``SIGABRT``, so that
faulthandler (on by ``PYTHONFAULTHANDLER``) prints every thread's stack into the failure.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Sequence

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: Seconds a fresh interpreter may take to reach its READY line.
IMPORT_ALLOWANCE_S = 180.0


def script_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a test's script: the repo root on the path, faulthandler on."""
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = REPO_ROOT + os.pathsep + full_env.get("PYTHONPATH", "")
    full_env.setdefault("PYTHONFAULTHANDLER", "1")
    if env:
        full_env.update(env)
    return full_env


class ScriptResult:
    """A finished script: ``returncode``, ``stdout`` (without the READY line), ``lines`` (its
    lines), ``stderr``, and ``after_ready_s``, the seconds from the READY line to its exit."""

    def __init__(self, returncode: int, stdout: str, stderr: str, after_ready_s: float) -> None:
        self.returncode = returncode
        self.lines = [line for line in stdout.splitlines() if not line.startswith("READY")]
        self.stdout = "".join(f"{line}\n" for line in self.lines)
        self.stderr = stderr
        self.after_ready_s = after_ready_s

    def __repr__(self) -> str:
        return f"rc={self.returncode}\nstdout:\n{self.stdout}\nstderr:\n{self.stderr[-6000:]}"


class _Reader:
    """Reads one pipe to its end on a thread of its own; notes when the READY line came."""

    def __init__(self, pipe: object) -> None:
        self.chunks: list[str] = []
        self.ready = threading.Event()
        self.ready_at = float("nan")
        self._thread = threading.Thread(target=self._read, args=(pipe,), name="test-script-reader", daemon=True)
        self._thread.start()

    def _read(self, pipe: object) -> None:
        for line in pipe:  # type: ignore[attr-defined]
            if line.startswith("READY") and not self.ready.is_set():
                self.ready_at = time.monotonic()
                self.ready.set()
            self.chunks.append(line)

    def text(self) -> str:
        self._thread.join(10)  # a grandchild may hold the pipe open
        return "".join(self.chunks)


def run_timed(
    code: str, budget_s: float, *, args: Sequence[str] = (), env: dict[str, str] | None = None
) -> ScriptResult:
    """Run ``code`` (which prints ``READY`` after its imports) with ``args``, and fail
    the test unless it exits within ``budget_s`` seconds of that line: a hang detector. A
    script that ends before its READY line (an import error) is returned as it ended."""
    import pytest

    # A script's interpreter keeps an ignored SIGINT (see tests/conftest.py): give it Python's.
    code = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n" + textwrap.dedent(code)
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO_ROOT,
        env=script_env(env),
    )
    out, err = _Reader(proc.stdout), _Reader(proc.stderr)
    started = time.monotonic()
    while not out.ready.wait(0.05):
        if proc.poll() is not None:
            return ScriptResult(proc.returncode, out.text(), err.text(), float("nan"))
        if time.monotonic() - started > IMPORT_ALLOWANCE_S:
            proc.kill()
            proc.wait()
            pytest.fail(f"no READY line within {IMPORT_ALLOWANCE_S:.0f}s\nstderr:\n{err.text()[-6000:]}")
    try:
        proc.wait(max(0.0, budget_s - (time.monotonic() - out.ready_at)))
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)  # faulthandler prints every thread's stack
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        hung = ScriptResult(proc.returncode, out.text(), err.text(), time.monotonic() - out.ready_at)
        pytest.fail(f"script hung: still running {budget_s}s after its imports\n{hung!r}")
    return ScriptResult(proc.returncode, out.text(), err.text(), time.monotonic() - out.ready_at)
