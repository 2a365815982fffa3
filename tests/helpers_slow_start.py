"""A dataset whose module, imported in a worker process, slows the start of the loader's third
worker thread there: a ``break`` right after the first batch then closes the epoch while that
thread is starting (tests/processes/test_processes.py)."""

from __future__ import annotations

import multiprocessing
import threading
import time

from torch.utils.data import Dataset

if multiprocessing.current_process().name != "MainProcess":
    _start = threading.Thread.start

    def _slow_start(self: threading.Thread) -> None:
        if self.name.startswith("threadloader-worker") and self.name.endswith("-2"):
            time.sleep(0.3)
        _start(self)

    threading.Thread.start = _slow_start  # type: ignore[method-assign]


class SlowStartItems(Dataset[int]):
    def __len__(self) -> int:
        return 40

    def __getitem__(self, i: int) -> int:
        return i
