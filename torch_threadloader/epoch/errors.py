"""The loader's timeout error (``torch_threadloader.LoaderTimeoutError``)."""

from __future__ import annotations

from typing import Any

__all__ = ["LoaderTimeoutError"]


class LoaderTimeoutError(RuntimeError, TimeoutError):
    """No batch within the loader's ``timeout``: a ``RuntimeError``, as torch raises, and a
    ``TimeoutError``. ``batch`` is its position in the epoch and ``indices`` its indices
    (``None`` for an ``IterableDataset``), ``timeout`` the seconds waited. The batch keeps its
    place: the next ``next()`` waits for it again, so the batches after it are never reordered.
    The same in every mode (threads, async datasets, node graphs, worker processes); it
    survives ``pickle`` and ``copy`` (sent from a child process, it arrives as itself)."""

    def __init__(self, timeout: float, batch: int, indices: Any) -> None:
        self.timeout = timeout
        self.batch = batch
        self.indices = indices
        where = f"batch {batch}" if indices is None else f"batch {batch} (indices {indices!r})"
        super().__init__(f"DataLoader timed out after {timeout} seconds waiting for {where}")

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.timeout, self.batch, self.indices), self.__dict__
