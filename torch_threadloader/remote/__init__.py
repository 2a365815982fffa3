"""Remote datasets: items fetched over HTTP, from S3 or from any fsspec filesystem, many at
a time on the loader's event loop (``pip install torch-threadloader[remote]``).

Each is an async map-style dataset (``async def __getitem__``) that ThreadLoader awaits on
its own loop; ``dataset.sync()`` serves ``torch.utils.data.DataLoader``. See docs/remote.md.
"""

from __future__ import annotations

from torch_threadloader.concurrency import in_flight, warn_if_unreachable
from torch_threadloader.remote.dataset import RemoteDataset
from torch_threadloader.remote.errors import (
    DeadlineExceededError,
    HttpStatusError,
    LocationError,
    NotFoundError,
    ReadTimeoutError,
    RemoteError,
    RetriesExhaustedError,
    TooLargeError,
    redact_url,
)
from torch_threadloader.remote.fsspec_dataset import FsspecDataset
from torch_threadloader.remote.http import HttpDataset
from torch_threadloader.remote.locations import Locations, make_locations
from torch_threadloader.remote.ranges import RangeError
from torch_threadloader.remote.retry import Retry
from torch_threadloader.remote.s3 import S3Dataset
from torch_threadloader.remote.sync import SyncDataset

__all__ = [
    "DeadlineExceededError",
    "FsspecDataset",
    "HttpDataset",
    "HttpStatusError",
    "LocationError",
    "Locations",
    "NotFoundError",
    "RangeError",
    "ReadTimeoutError",
    "RemoteDataset",
    "RemoteError",
    "RetriesExhaustedError",
    "Retry",
    "S3Dataset",
    "SyncDataset",
    "TooLargeError",
    "in_flight",
    "make_locations",
    "redact_url",
    "warn_if_unreachable",
]
