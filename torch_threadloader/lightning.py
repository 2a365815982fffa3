"""The documented path of :mod:`torch_threadloader.tools.lightning` (``LoaderStatsCallback``; needs Lightning)."""

from torch_threadloader.tools.lightning import *  # noqa: F403
from torch_threadloader.tools.lightning import __all__ as __all__
