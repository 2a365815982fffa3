"""The loader's timeout error (``torch_threadloader.LoaderTimeoutError``)."""

from __future__ import annotations

from collections.abc import Callable

from datapipes.errors import _rebuild
from torch_threadloader.userdata import Indices

__all__ = ["LoaderTimeoutError"]


class LoaderTimeoutError(RuntimeError, TimeoutError):
    """No batch within the loader's ``timeout``: a ``RuntimeError``, as torch raises, and a
    ``TimeoutError``. ``batch`` is its position in the epoch and ``indices`` its indices
    (``None`` for an ``IterableDataset``), ``timeout`` the seconds waited. The batch keeps its
    place: the next ``next()`` waits for it again, so the batches after it are never reordered.
    The same in every mode (threads, async datasets, node graphs, worker processes); it
    survives ``pickle`` and ``copy`` (sent from a child process, it arrives as itself).
    ``LoaderTimeoutError(message)`` alone (as torch's ``ExceptionWrapper.reraise()`` rebuilds
    an error) keeps the message; ``timeout``, ``batch`` and ``indices`` are then None."""

    def __init__(self, timeout: float | str, batch: int | None = None, indices: Indices | None = None) -> None:
        if isinstance(timeout, str):  # the message alone
            self.timeout: float | None = None
            self.batch: int | None = None
            self.indices = indices
            super().__init__(timeout)
            return
        self.timeout = timeout
        self.batch = batch
        self.indices = indices
        where = f"batch {batch}" if indices is None else f"batch {batch} (indices {indices!r})"
        super().__init__(f"DataLoader timed out after {timeout} seconds waiting for {where}")

    def __reduce__(self) -> tuple[Callable[..., BaseException], tuple[type[BaseException], str, dict[str, object]]]:
        return _rebuild, (type(self), str(self), self.__dict__)
