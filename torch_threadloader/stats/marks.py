"""Which loader's stats the running thread (or task) records into, and :func:`stage`, the
block a dataset marks as a stage of its own (``"transform"``)."""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from torch_threadloader.skip import mark_stage
from torch_threadloader.stats.stages import STAGES

if TYPE_CHECKING:
    from torch_threadloader.stats.loader_stats import LoaderStats

__all__ = ["current_stats", "marked", "set_current", "stage"]

_current: contextvars.ContextVar[LoaderStats | None] = contextvars.ContextVar("threadloader_stats", default=None)
_marked = threading.local()  # seconds of the running item spent in marked stages, per thread


def current_stats() -> LoaderStats | None:
    """The stats of the loader whose thread (or task) this is, if it keeps stats."""
    return _current.get()


def set_current(stats: LoaderStats | None) -> None:
    """Make ``stats`` the calling thread's (or task's) loader stats, for :func:`stage`."""
    _current.set(stats)


def marked() -> float:
    """Seconds this thread has spent in :func:`stage` blocks (a running total)."""
    return float(getattr(_marked, "seconds", 0.0))


@contextlib.contextmanager
def stage(name: str) -> Iterator[None]:
    """Time the block as stage ``name`` (e.g. ``"transform"``) of the loader that runs it;
    the time is taken out of the enclosing item's ``fetch``. Costs two clock reads when the
    loader keeps stats, a context-variable read when it does not, and works anywhere."""
    stats = _current.get()
    if stats is None:
        try:
            yield
        except BaseException as exc:
            mark_stage(exc, name)  # for the record of a skipped sample
            raise
        return
    target = stats.stages.get(name)
    if target is None:
        raise ValueError(f"stage must be one of {', '.join(STAGES[:5])}, got {name!r}")
    stats.marks = True  # only ever set: a plain attribute write is safe from any thread
    start = time.perf_counter()
    try:
        yield
    except BaseException as exc:
        target.add_error()
        mark_stage(exc, name)
        raise
    finally:
        seconds = time.perf_counter() - start
        target.record(seconds)
        _marked.seconds = getattr(_marked, "seconds", 0.0) + seconds
