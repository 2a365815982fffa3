"""``python -m torch_threadloader bench MODULE:FACTORY``: time a user's own dataset under
``torch.utils.data.DataLoader`` and under :class:`ThreadLoader` over a small grid of settings,
and say which to use.

``FACTORY`` (a function, called with no arguments) returns a dataset, or a loader whose
dataset, batch size, sampler, ``collate_fn`` and other settings are reused. Each configuration
runs for at most ``batches`` batches or ``seconds`` seconds (epochs are restarted until one is
reached, with ``persistent_workers=True`` when there are workers); the rate is the steady one:
samples per second once the batches prefetched at the start are consumed (the time to an
epoch's first batch, workers' startup included, is reported apart). ThreadLoaders run
with ``stats=True``; the best one's :meth:`ThreadLoader.report` is kept. Every loader is
closed (torch's worker processes too) before the next configuration starts.

See ``docs/tuning.md``.
"""

from torch_threadloader.tools.tune.grid import default_grid, parse_grid
from torch_threadloader.tools.tune.result import BenchResult, Run, dumps, format_result
from torch_threadloader.tools.tune.run import DEFAULT_BATCHES, DEFAULT_SECONDS, Progress, bench
from torch_threadloader.tools.tune.target import DEFAULT_BATCH_SIZE, FactoryError, Target, describe, load_target

__all__ = [
    "BenchResult",
    "DEFAULT_BATCHES",
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_SECONDS",
    "FactoryError",
    "Progress",
    "Run",
    "Target",
    "bench",
    "default_grid",
    "describe",
    "dumps",
    "format_result",
    "load_target",
    "parse_grid",
]
