"""The old name of :mod:`torch_threadloader.stats` (``from torch_threadloader.pipeline_stats import stage``)."""

from torch_threadloader.stats import *  # noqa: F403
from torch_threadloader.stats import __all__ as __all__
