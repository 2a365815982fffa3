"""A loader's stats per stage (``stats=True``), and the verdict ``report()`` draws from them.

Stages: ``sampling`` (the sampler's ``next()``, in the caller's thread), ``fetch`` (each
item's ``__getitem__``, or the dataset's iterator, less what it marks as another stage),
``transform`` (what the dataset marks with :func:`stage`), ``collate``, ``pin``,
``handover`` (the caller's wait inside ``next()``) and ``train`` (the caller's time between
two ``next()`` calls). ``stages.py`` holds one stage's counters, ``loader_stats.py`` a
loader's, ``marks.py`` the current loader's stats and :func:`stage`, ``verdict.py`` the
verdict.

Cost: with stats on, two ``perf_counter()`` calls and a list append per item, a few per
batch, and the thread's CPU time read at most every 5 ms per thread
(``python -m benchmarks stats_cost``); with stats off, nothing.
"""

from torch_threadloader.stats.loader_stats import LoaderStats, timed_iter
from torch_threadloader.stats.marks import current_stats, marked, set_current, stage
from torch_threadloader.stats.stages import CPU_SAMPLE_INTERVAL, STAGES, WORKER_STAGES, DrainedStage, Stage
from torch_threadloader.stats.verdict import verdict

__all__ = [
    "CPU_SAMPLE_INTERVAL",
    "DrainedStage",
    "LoaderStats",
    "STAGES",
    "Stage",
    "WORKER_STAGES",
    "current_stats",
    "marked",
    "set_current",
    "stage",
    "timed_iter",
    "verdict",
]
