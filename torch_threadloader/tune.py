"""The documented path of :mod:`torch_threadloader.tools.tune` (``docs/tuning.md``)."""

from torch_threadloader.tools.tune import *  # noqa: F403
from torch_threadloader.tools.tune import __all__ as __all__
