"""A dataset whose module ignores SIGTERM when imported (a handler for graceful preemption)."""

from __future__ import annotations

import signal
import time

from torch.utils.data import Dataset


def _ignore(signum: int, frame: object) -> None:
    pass


signal.signal(signal.SIGTERM, _ignore)


class IgnoresTerm(Dataset[int]):
    """``ds[i] == i``; index ``at`` sleeps ``seconds``."""

    def __init__(self, n: int, at: int, seconds: float) -> None:
        self.n = n
        self.at = at
        self.seconds = seconds

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        if i == self.at:
            time.sleep(self.seconds)
        return i
