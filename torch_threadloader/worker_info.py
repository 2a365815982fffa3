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
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch.utils.data
from torch.utils.data import Dataset
from torch.utils.data._utils.worker import (
    WorkerInfo,  # the type get_worker_info() returns; not re-exported by torch.utils.data
)

from torch_threadloader.random_state import WorkerRNG
from torch_threadloader.userdata import Sample

__all__ = [
    "WORKER_COPIES",
    "WORKER_METHODS",
    "WorkerRNG",
    "check_worker_copy",
    "get_worker_info",
    "install_torch_hook",
    "make_worker_info",
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


def check_worker_copy(worker_copy: object) -> str:
    """``worker_copy`` as given: ``"shallow"`` (the default: each worker gets
    ``copy.copy(dataset)``, so what ``worker_init_fn`` or an item sets on the dataset is the
    worker's own, while the objects inside it are shared by every worker) or ``"deep"``
    (``copy.deepcopy``, as a worker process's unpickled copy: every object reachable from the
    dataset is the worker's own, but for what ``deepcopy`` keeps, such as ``str`` and ``int``) or
    ``"pickle"`` (the dataset pickled and unpickled on the worker's thread, as a worker process
    receives it: every object is one that thread made, which on a free-threaded build keeps its
    reference counts uncontended). Anything else is a ``ValueError`` naming it."""
    if not isinstance(worker_copy, str) or worker_copy not in WORKER_COPIES:
        raise ValueError(f"worker_copy must be one of {', '.join(map(repr, WORKER_COPIES))}, got {worker_copy!r}")
    return worker_copy


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
