"""One epoch of a ThreadLoader: :class:`Epoch` (``epoch.py``), the draws in torch's order (``seeds.py``), the per-batch hooks
(``hooks.py``) and :class:`LoaderTimeoutError` (``errors.py``)."""

from __future__ import annotations

from torch_threadloader.epoch.epoch import DEFAULT_JOIN_TIMEOUT, INTERRUPT_TIMEOUT, Epoch, EpochRun
from torch_threadloader.epoch.errors import LoaderTimeoutError

__all__ = ["DEFAULT_JOIN_TIMEOUT", "INTERRUPT_TIMEOUT", "Epoch", "EpochRun", "LoaderTimeoutError"]
