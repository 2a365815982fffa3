"""How one batch is loaded: the same steps as torch's fetchers, run by the loader's workers.

:class:`Workers` (``workers.py``) is what torch's worker processes have of their own, made per
worker thread: a copy of the dataset, a :class:`~torch.utils.data.WorkerInfo` and one
``worker_init_fn`` call. The fetchers load a batch the way torch's ``_MapDatasetFetcher``
(``map_fetcher.py``; with stats, ``timed.py``; async datasets, ``async_fetch.py``) and
``_IterableDatasetFetcher`` (``iterable.py``) do; ``getters.py`` reads what a dataset offers.
With ``item_concurrency > 1`` items are the unit of concurrency: their slots are shared by every
batch loading (async: ``item_slots.py``, ``collate_turns.py``; worker threads:
``thread_slots.py``, ``shared_items.py``).
"""

from torch_threadloader.fetch.async_fetch import AsyncMapFetcher, gather_window
from torch_threadloader.fetch.getters import batch_getter, is_async_dataset
from torch_threadloader.fetch.iterable import IterableWorkerStream
from torch_threadloader.fetch.map_fetcher import MapFetcher, drawn_per_sample
from torch_threadloader.fetch.workers import Workers, rebound

__all__ = [
    "AsyncMapFetcher",
    "IterableWorkerStream",
    "MapFetcher",
    "Workers",
    "batch_getter",
    "drawn_per_sample",
    "gather_window",
    "is_async_dataset",
    "rebound",
]
