"""``ThreadLoader(worker_processes=P)``: P persistent worker processes, each running the loader's
thread graph over its share of the batches.

The parent keeps everything that decides *what* is loaded, exactly as the in-process loader:
the sampler and its random draws, the base seed, the checkpoint record. It sends index batches
to the children (with ``in_order=True`` the batch at position ``j`` of the epoch to child
``j % P``, a resumed epoch's too), puts the results back in order, and hands them to the
epoch as ``(position, batch)``, as the thread
graph does, so ``state_dict()``, ``timeout`` and errors work as they do in process. Each child
(``processes/child.py``) builds the same graph the loader builds in process, with
``max(num_workers, 1)`` threads: thread ``t`` of child ``c`` is worker ``t * P + c`` of
``P * max(num_workers, 1)``.

Bounds: a child holds at most ``max(num_workers, 1) * prefetch_factor`` batches in its graph
plus one being handed over (an ``IterableDataset``'s: without it, a credit per batch); in all
at most ``P * (max(num_workers, 1) * prefetch_factor + 1)`` batches are sent and not yet
returned by ``next()``.

Owners: the loader owns its :class:`WorkerProcesses` (started at the first ``iter()``, kept
across epochs, stopped by ``close()``, Ctrl-C in ``next()`` or garbage collection of the
loader, and by multiprocessing's exit hook); a second live epoch of the same loader starts
processes of its own and stops them when it ends. The parent runs no thread for them: it waits
on the children's pipes and process sentinels with ``multiprocessing.connection.wait``.

The package's modules: ``settings`` (the argument checks), ``inputs`` (what a child is sent:
the loader's plan and the objects a plan cannot hold), ``messages`` (the typed messages),
``errors``, ``pool`` (the processes' lifecycle), ``child`` and ``child_parts`` (a worker
process), ``node``, ``epoch`` and ``transport`` (the parent's side of one epoch: the one
``datapipes`` dispatcher over the process transport) and ``turns`` (an ``IterableDataset``'s
transport for that dispatcher: whose batch comes next, with credits in place of index batches).
"""

from __future__ import annotations

from torch_threadloader.processes.child import child_main
from torch_threadloader.processes.errors import PackedError, WorkerProcessError, pack_error, unpack_error
from torch_threadloader.processes.graph import ProcessGraph
from torch_threadloader.processes.inputs import ChildInputs
from torch_threadloader.processes.node import process_graph
from torch_threadloader.processes.pool import PROCESS_EXIT_TIMEOUT, WorkerProcesses
from torch_threadloader.processes.settings import (
    check_context,
    check_process_affinity,
    check_process_nice,
    check_worker_processes,
    resolve_context,
)

__all__ = [
    "PROCESS_EXIT_TIMEOUT",
    "ChildInputs",
    "PackedError",
    "ProcessGraph",
    "WorkerProcessError",
    "WorkerProcesses",
    "check_context",
    "check_process_affinity",
    "check_process_nice",
    "check_worker_processes",
    "child_main",
    "pack_error",
    "process_graph",
    "resolve_context",
    "unpack_error",
]
