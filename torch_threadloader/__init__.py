"""torch-threadloader: PyTorch data loading on threads and asyncio instead of worker processes.

``ThreadLoader`` is a drop-in subclass of :class:`torch.utils.data.DataLoader`; the
``datapipes`` package holds the composable nodes it is built from.
"""

from torch_threadloader.loader import LoaderTimeoutError, ThreadLoader
from torch_threadloader.over_budget import BatchCostWarning
from torch_threadloader.processes import WorkerProcessError
from torch_threadloader.random_state import WorkerRandomStateWarning
from torch_threadloader.skip import TooManyErrors
from torch_threadloader.stall import LoaderStallWarning, StallReport
from torch_threadloader.stats import stage
from torch_threadloader.worker_info import WorkerRNG, get_worker_info

__all__ = [
    "BatchCostWarning",
    "LoaderStallWarning",
    "LoaderTimeoutError",
    "StallReport",
    "ThreadLoader",
    "TooManyErrors",
    "WorkerProcessError",
    "WorkerRNG",
    "WorkerRandomStateWarning",
    "get_worker_info",
    "stage",
]

__version__ = "0.1.0"
