"""``RemoteDataset``: what the remote datasets share (locations, retries, caps, the sync
adapter); each subclass says how one attempt fetches one location."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from torch.utils.data import Dataset

from torch_threadloader.remote.errors import redact_url
from torch_threadloader.remote.locations import Locations, LocationsArg, make_locations
from torch_threadloader.remote.retry import Retry, with_retries

if TYPE_CHECKING:
    from torch_threadloader.remote.sync import SyncDataset

__all__ = ["DEFAULT_TIMEOUT", "RemoteDataset"]

#: Seconds one attempt may take by default (connect, headers and body).
DEFAULT_TIMEOUT = 60.0


class RemoteDataset(Dataset[bytes]):
    """An async map-style dataset whose item ``i`` is the bytes at ``locations[i]``.

    ``await dataset[i]`` on any event loop: ThreadLoader awaits it on its own loop (up to
    ``max(num_workers, 1) * min(item_concurrency, batch_size)`` in flight) and awaits
    :meth:`aclose` when it closes; ``dataset.sync()`` is the same dataset for
    ``torch.utils.data.DataLoader`` and other synchronous callers (given the bare dataset,
    DataLoader's batched path raises a ``TypeError`` saying so).

    Arguments shared by every remote dataset:

    - ``locations``: a list, a function of the index (with ``length``), or a template with
      ``columns`` (see :func:`~torch_threadloader.remote.make_locations`); ``base`` confines
      a list or function.
    - ``retry``: a :class:`Retry` (the default retries transient failures 3 times).
    - ``timeout``: seconds per attempt; ``deadline``: seconds per item over all attempts
      (``None``: no deadline). Both positive.
    - ``max_bytes``: the largest object accepted (``None``: no cap): an object of exactly
      ``max_bytes`` is returned, a larger one raises :class:`TooLargeError`.
    - ``byte_range``: ``(start, stop)``: only bytes ``start`` to ``stop - 1`` of each object.
    """

    def __copy__(self) -> Any:
        """A ThreadLoader worker's copy (``copy.copy``): the same settings and the same clients,
        so every worker shares one session per event loop (pickling, for a worker process,
        makes new ones; so does ``worker_copy="deep"``)."""
        new = type(self).__new__(type(self))
        new.__dict__.update(self.__dict__)
        return new

    def __init__(
        self,
        locations: LocationsArg,
        *,
        length: int | None = None,
        columns: Mapping[str, Sequence[Any]] | None = None,
        base: str | None = None,
        retry: Retry | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        deadline: float | None = None,
        max_bytes: int | None = None,
        byte_range: tuple[int, int] | None = None,
    ) -> None:
        self.locations: Locations = make_locations(locations, length=length, columns=columns, base=base)
        if retry is None:
            retry = Retry()
        if not isinstance(retry, Retry):
            raise TypeError(f"retry must be a Retry, got {type(retry).__name__}")
        self.retry = retry
        self.timeout = _positive_or_none("timeout", timeout)
        self.deadline = _positive_or_none("deadline", deadline)
        if max_bytes is not None and (isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0):
            raise ValueError(f"max_bytes must be an int >= 0 or None, got {max_bytes!r}")
        self.max_bytes = max_bytes
        if byte_range is not None and (
            not isinstance(byte_range, tuple)
            or len(byte_range) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in byte_range)
            or not 0 <= byte_range[0] < byte_range[1]
        ):
            raise ValueError(
                f"byte_range must be a tuple (start, stop) of ints with 0 <= start < stop, got {byte_range!r}"
            )
        self.byte_range = byte_range

    def __len__(self) -> int:
        return len(self.locations)

    async def __getitem__(self, index: int) -> bytes:  # type: ignore[override]
        """The bytes of item ``index``, retried as ``retry`` says. Raises the item's typed
        error (see ``torch_threadloader.remote.errors``); cancelling it stops its request."""
        location = self.locations[index]
        shown = redact_url(location)
        return await with_retries(
            lambda limit: self._fetch(location, shown, limit),
            retry=self.retry,
            timeout=self.timeout,
            deadline=self.deadline,
            location=shown,
            retry_timeouts=self._timeouts_stop_attempts(location),
        )

    def _timeouts_stop_attempts(self, location: str) -> bool:
        """Whether an attempt at ``location`` that passes its timeout stops (so it may be
        retried): true for requests on the event loop."""
        return True

    def __getitems__(self, indices: Sequence[int]) -> list[bytes]:
        """Not a way in: ``torch.utils.data.DataLoader`` calls this (synchronously) for each
        batch, and an async dataset cannot answer it. Raises ``TypeError`` saying to pass
        ``dataset.sync()``. (ThreadLoader awaits ``__getitem__`` and never calls this.)"""
        raise TypeError(
            f"{type(self).__name__} is an async dataset (async def __getitem__): a synchronous caller such as "
            f"torch.utils.data.DataLoader cannot fetch from it. Pass dataset.sync() instead "
            f"(DataLoader(dataset.sync(), ...)), or load it with torch_threadloader.ThreadLoader."
        )

    async def _fetch(self, location: str, shown: str, timeout: float | None) -> bytes:
        """One attempt: the bytes at ``location``; raise ``Transient`` to be retried.
        ``shown`` is the location to put in errors."""
        raise NotImplementedError

    async def aclose(self) -> None:
        """Close what this dataset holds on the running loop (its connections); idempotent.
        ThreadLoader awaits it when it closes."""

    def sync(self, concurrency: int = 64) -> SyncDataset[bytes]:
        """This dataset for synchronous callers (``torch.utils.data.DataLoader``, a
        ``ThreadMapper``): see :class:`~torch_threadloader.remote.SyncDataset`."""
        from torch_threadloader.remote.sync import SyncDataset

        return SyncDataset(self, concurrency=concurrency)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.locations!r})"


def _positive_or_none(name: str, value: float | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive number of seconds or None, got {value!r}")
    return float(value)
