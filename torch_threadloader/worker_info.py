"""Per-thread worker info: what ``get_worker_info()`` answers inside a loader's threads.

torch answers ``torch.utils.data.get_worker_info()`` from one module global, set once in each
worker *process*. Threads share that global, so ThreadLoader keeps its own answer in a
``contextvars.ContextVar`` (each thread has its own context, and each asyncio task a copy of
the context that made it, so a batch's coroutines see the worker that loads it) and, on import
of this package, wraps torch's function so that it too
answers per thread: inside a ThreadLoader worker thread it returns that thread's
:class:`torch.utils.data.WorkerInfo` (``worker_method="thread"``, a seeded per-thread ``rng``,
so ``torch.random.thread_safe_generator()`` works); everywhere else it calls torch's own
function and answers exactly as before.

Limits: code that did ``from torch.utils.data import get_worker_info`` *before* this package
was imported holds torch's original function and sees ``None`` in our threads; call it as
``torch.utils.data.get_worker_info()`` or use :func:`torch_threadloader.get_worker_info`.
While ``collate_fn`` runs the wrapped function answers ``None``: torch's ``default_collate``
takes a non-``None`` answer to mean "I am in a worker process" and then allocates every batch
in shared memory, which only costs time when there is no process boundary.

Also here: what each worker gets of the dataset (``worker_copy``), and its default, chosen by
whether this interpreter runs threads in parallel (:func:`gil_disabled`).
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import dataclasses
import pickle
import sys
import sysconfig
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch.utils.data
from torch.utils.data import Dataset
from torch.utils.data._utils.worker import (
    WorkerInfo,  # the type get_worker_info() returns; not re-exported by torch.utils.data
)

import datapipes as dp
from torch_threadloader.random_state import WorkerRNG
from torch_threadloader.userdata import Sample

__all__ = [
    "WORKER_COPIES",
    "WORKER_METHODS",
    "WorkerRNG",
    "check_worker_copy",
    "default_worker_copy",
    "get_worker_info",
    "gil_disabled",
    "install_torch_hook",
    "make_worker_info",
    "resolve_worker_copy",
    "resolve_worker_method",
    "sample_worker_info",
]

#: ``worker_method`` values: torch's own spellings (``WorkerInfo.worker_method``).
WORKER_METHODS = ("thread", "multiprocessing")
#: ``worker_copy`` values: what each worker gets of the dataset.
WORKER_COPIES = ("shallow", "deep", "pickle")


def resolve_worker_method(worker_method: object, num_workers: int, worker_processes: int) -> tuple[int, int]:
    """``(num_workers, worker_processes)`` for ``worker_method``, torch's spelling of where
    workers run (``WorkerInfo.worker_method``): ``None`` leaves both as given; ``"thread"``
    means worker threads of this process (``worker_processes`` must then be 0);
    ``"multiprocessing"`` means worker processes: with ``worker_processes=0``, the
    ``num_workers`` workers become that many processes of one worker thread each (batch ``i``
    still goes to worker ``i % num_workers``, as in torch's worker processes); with
    ``worker_processes=P`` both stay as given. Anything else is a ``ValueError`` naming it."""
    if worker_method is None:
        return num_workers, worker_processes
    if not isinstance(worker_method, str) or worker_method not in WORKER_METHODS:
        raise ValueError(
            f"worker_method must be one of {', '.join(map(repr, WORKER_METHODS))} or None, got {worker_method!r}"
        )
    if worker_method == "thread":
        if worker_processes:
            raise ValueError(
                f"worker_method='thread' runs the workers as threads of this process, but worker_processes="
                f"{worker_processes!r} asks for worker processes; use worker_method='multiprocessing', or leave "
                "worker_processes=0"
            )
        return num_workers, worker_processes
    if worker_processes:
        return num_workers, worker_processes
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
        raise ValueError(
            f"worker_method='multiprocessing' runs num_workers worker processes: num_workers must be a positive "
            f"int, got {num_workers!r}"
        )
    return 1, num_workers


def gil_disabled() -> bool:
    """Whether this interpreter runs Python threads in parallel: a free-threaded build
    (``Py_GIL_DISABLED``) with the GIL off now (``sys._is_gil_enabled()``: an extension module
    without free-threading support, or ``PYTHON_GIL=1``, turns it back on)."""
    if not sysconfig.get_config_var("Py_GIL_DISABLED"):
        return False
    is_enabled = getattr(sys, "_is_gil_enabled", None)
    return is_enabled is not None and not is_enabled()


def default_worker_copy(parallel: bool | None = None) -> str:
    """``worker_copy`` when none is given: ``"pickle"`` where threads run Python in parallel
    (``parallel``, by default :func:`gil_disabled`), as each worker process unpickles its own
    dataset: objects a thread made keep their reference counts uncontended, so workers that
    read the dataset scale; ``"shallow"`` with the GIL on, where every worker's copy would cost
    its time and memory and gain nothing."""
    if parallel is None:
        parallel = gil_disabled()
    return "pickle" if parallel else "shallow"


def check_worker_copy(worker_copy: object) -> str:
    """``worker_copy`` resolved: ``None`` is :func:`default_worker_copy` (``"pickle"`` on a
    free-threaded build with the GIL off, else ``"shallow"``); ``"shallow"`` gives each worker
    ``copy.copy(dataset)`` (what ``worker_init_fn`` or an item sets on the dataset is the
    worker's own, the objects inside it are shared by every worker); ``"deep"`` gives
    ``copy.deepcopy`` (every object reachable from the dataset is the worker's own, but for what
    ``deepcopy`` keeps, such as ``str`` and ``int``); ``"pickle"`` the dataset pickled and
    unpickled on the worker's thread, as a worker process receives it (every object is one that
    thread made, which on a free-threaded build keeps its reference counts uncontended).
    Anything else is a ``ValueError`` naming it."""
    if worker_copy is None:
        return default_worker_copy()
    if not isinstance(worker_copy, str) or worker_copy not in WORKER_COPIES:
        raise ValueError(
            f"worker_copy must be one of {', '.join(map(repr, WORKER_COPIES))} or None (the default: "
            f"{default_worker_copy()!r} on this interpreter), got {worker_copy!r}"
        )
    return worker_copy


class _Discard:
    """A file that keeps nothing: a pickle written to it costs its time, not its bytes."""

    def write(self, data: bytes) -> int:
        return len(data)


def _copies(dataset: object) -> bool:
    try:
        copy.copy(dataset)
    except Exception:
        return False
    return True


def resolve_worker_copy(worker_copy: object, dataset: object, *, copied: bool) -> str:
    """``worker_copy`` as the loader keeps it: :func:`check_worker_copy`'s answer, but where
    ``None`` chose ``"pickle"``, the workers will copy the dataset (``copied``: some workers,
    and the dataset not a ``datapipes`` graph) and it cannot be pickled, ``"shallow"``, with
    one ``RuntimeWarning`` saying why: once per loader, here, rather than a failed pickle per
    worker start (none where it cannot even be copied: the workers then share it, and say so
    once). The check pickles the dataset into a file that keeps nothing."""
    resolved = check_worker_copy(worker_copy)
    if worker_copy is not None or resolved != "pickle" or not copied or isinstance(dataset, dp.Node):
        return resolved
    try:
        pickle.Pickler(_Discard(), pickle.HIGHEST_PROTOCOL).dump(dataset)
    except Exception as exc:
        if not _copies(dataset):  # the workers will share it, and say so themselves, once
            return "shallow"
        warnings.warn(
            f"the dataset {type(dataset).__name__} cannot be pickled ({exc!r}): on this free-threaded build "
            "worker_copy defaults to 'pickle' (each worker its own unpickled copy, as each of torch's worker "
            "processes has); each worker gets a shallow copy (copy.copy) instead, sharing the objects inside it. "
            "Pass worker_copy='shallow' to choose that, or make the dataset picklable",
            RuntimeWarning,
            stacklevel=3,
        )
        return "shallow"
    return resolved


_info: contextvars.ContextVar[WorkerInfo | None] = contextvars.ContextVar("threadloader_worker_info", default=None)
_hidden: contextvars.ContextVar[bool] = contextvars.ContextVar("threadloader_worker_info_hidden", default=False)
_WORKER_INFO_FIELDS = {f.name for f in dataclasses.fields(WorkerInfo)}


def get_worker_info() -> WorkerInfo | None:
    """The :class:`~torch.utils.data.WorkerInfo` of the calling loader thread, else ``None``."""
    return _info.get()


def make_worker_info(
    worker_id: int, num_workers: int, seed: int, dataset: Dataset[Sample], rng: WorkerRNG | None = None
) -> WorkerInfo:
    """A ``WorkerInfo`` for thread ``worker_id``; its ``rng`` is ``rng`` (the worker's random
    state), else one seeded from ``seed``."""
    rng = WorkerRNG(seed) if rng is None else rng
    # Values left untyped: torch's stubs want its own ``_RNG`` class for ``rng``, whose fields WorkerRNG has.
    fields: dict[str, Any] = {"id": worker_id, "num_workers": num_workers, "seed": seed, "dataset": dataset}
    if "rng" in _WORKER_INFO_FIELDS:  # torch >= 2.10 knows thread workers
        fields["rng"] = rng
        fields["worker_method"] = "thread"
    return WorkerInfo(**fields)


def sample_worker_info(info: WorkerInfo, rng: WorkerRNG) -> WorkerInfo:
    """``info`` for one sample: the same worker, its ``rng`` the sample's (so
    ``torch.random.thread_safe_generator()`` is the generator the sample's global draws come
    from, as in a worker process). A torch without ``WorkerInfo.rng`` gets ``info`` as it is."""
    if "rng" not in _WORKER_INFO_FIELDS:
        return info
    return dataclasses.replace(info, rng=rng)  # type: ignore[arg-type]  # the same fields as torch's _RNG


def set_worker_info(info: WorkerInfo | None) -> None:
    """Set (or clear, with ``None``) the calling thread's (or task's) worker info."""
    _info.set(info)


@contextlib.contextmanager
def hidden_from_torch() -> Iterator[None]:
    """Within the block, torch's wrapped ``get_worker_info()`` answers ``None`` on this thread."""
    token = _hidden.set(True)
    try:
        yield
    finally:
        _hidden.reset(token)


_install_lock = threading.Lock()


def install_torch_hook() -> None:
    """Make ``torch.utils.data.get_worker_info()`` answer per thread (idempotent)."""
    worker_module = torch.utils.data._utils.worker
    with _install_lock:
        original: Callable[[], WorkerInfo | None] = worker_module.get_worker_info
        if getattr(original, "_threadloader_wrapped", False):
            return

        def get_worker_info_per_thread() -> WorkerInfo | None:
            info = _info.get()
            if info is None:
                return original()
            return None if _hidden.get() else info

        get_worker_info_per_thread.__doc__ = original.__doc__
        vars(get_worker_info_per_thread)["_threadloader_wrapped"] = True  # marks it installed, also across a reload
        worker_module.get_worker_info = get_worker_info_per_thread
        torch.utils.data.get_worker_info = get_worker_info_per_thread
