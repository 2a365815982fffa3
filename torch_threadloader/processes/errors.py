"""Errors of worker-process mode: :class:`WorkerProcessError` (a process lost), how a process
ended in words, and an exception packed for the trip from a child to the loader's process."""

from __future__ import annotations

import dataclasses
import importlib
import pickle
import signal
import traceback

import datapipes as dp
from torch_threadloader.skip import error_text

__all__ = ["PackedError", "WorkerProcessError", "describe_exit", "pack_error", "raised_in", "unpack_error"]

#: Notes the thread graph puts on an error name the item by its number in a child's share;
#: the parent replaces them with one naming the batch's place in the epoch.
_LOCAL_NOTE = "[datapipes] raised in "


class WorkerProcessError(dp.WorkerLostError):
    """A worker process ended while it held batches of the epoch (killed, a crash in a C
    extension, ``os._exit``): raised by ``next()``, naming the process, how it ended and the
    first batch it lost. The epoch ends there (its next ``next()`` raises ``StopIteration``);
    the next ``iter()`` starts a new process in its place. The worker-process form of
    :class:`datapipes.WorkerLostError` (``worker`` names the process); survives ``pickle``.
    Built from its message alone, ``process``, ``pid``, ``exitcode`` and ``worker`` are None."""

    def __init__(
        self,
        message: str,
        *,
        process: int | None = None,
        pid: int | None = None,
        exitcode: int | None = None,
        worker: str | None = None,
    ) -> None:
        self.process = process
        self.pid = pid
        self.exitcode = exitcode
        if worker is None and process is not None:
            worker = f"worker process {process} (pid {pid})"
        super().__init__(message, worker=worker)


def describe_exit(exitcode: int | None) -> str:
    """How a process ended, in words, from its ``exitcode`` (``None``: it has not)."""
    if exitcode is None:
        return "stopped answering"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"was killed by {name}"
    if exitcode == 1:  # an uncaught exception: Python printed it
        return (
            "exited with code 1 (its traceback is on stderr; a dataset class defined in an interactive "
            "__main__, such as a notebook's, cannot be imported by a worker process)"
        )
    return f"exited with code {exitcode}"


@dataclasses.dataclass(frozen=True, slots=True)
class PackedError:
    """An exception for the trip to the parent: ``blob`` its pickle when it survives a round
    trip (else ``None``), ``name`` its type as ``module:qualname``, ``message`` its text and
    ``text`` its formatted traceback."""

    blob: bytes | None
    name: str
    message: str
    text: str


def pack_error(exc: BaseException) -> PackedError:
    """``exc`` packed (see :class:`PackedError`). Never raises: an exception whose ``str()``
    raises travels with a message saying so (``traceback`` formats it so too)."""
    notes = getattr(exc, "__notes__", None)
    if isinstance(notes, list):
        notes[:] = [n for n in notes if not (isinstance(n, str) and n.startswith(_LOCAL_NOTE))]
    text = "".join(traceback.format_exception(exc))
    blob: bytes | None
    try:
        blob = pickle.dumps(exc)
        pickle.loads(blob)
    except Exception:
        blob = None
    cls = type(exc)
    return PackedError(blob, f"{cls.__module__}:{cls.__qualname__}", error_text(exc), text)


def unpack_error(packed: PackedError) -> BaseException:
    """The exception :func:`pack_error` packed: the same type and message (its attributes too
    when it pickles). One that does not pickle is rebuilt as ``type(message)``; a type that
    cannot be imported or built so becomes a ``RuntimeError`` naming it."""
    if packed.blob is not None:
        try:
            exc = pickle.loads(packed.blob)
            if isinstance(exc, BaseException):
                return exc
        except Exception:
            pass
    module, _, qualname = packed.name.partition(":")
    try:
        cls: object = importlib.import_module(module)
        for part in qualname.split("."):
            cls = getattr(cls, part)
        if isinstance(cls, type) and issubclass(cls, BaseException):
            return cls(packed.message)
    except Exception:
        pass
    return RuntimeError(f"{module}.{qualname}: {packed.message}")


def raised_in(packed: PackedError, where: str) -> BaseException:
    """:func:`unpack_error` of ``packed``, with a note naming ``where`` it was raised and its
    traceback there."""
    exc = unpack_error(packed)
    exc.add_note(f"[torch_threadloader] raised in {where}; there:\n{packed.text}")
    return exc
