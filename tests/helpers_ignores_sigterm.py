"""A dataset whose module ignores SIGTERM when imported (a handler for graceful preemption)."""

from __future__ import annotations

import signal

from tests.helpers_datasets import SleepsAt


def _ignore(signum: int, frame: object) -> None:
    pass


signal.signal(signal.SIGTERM, _ignore)


class IgnoresTerm(SleepsAt):
    """``SleepsAt``, defined in a module that ignores SIGTERM: a worker process that unpickles
    it imports this module, and so ignores SIGTERM too."""
