"""One epoch in the loader's process when its work runs in worker processes, for a map-style
or async dataset: the :class:`~datapipes.dispatch.Dispatcher` over the
:class:`~torch_threadloader.processes.transport.ProcessTransport` (the one dispatcher of every
concurrent mode: dispatch, reorder, bound, timeout, close from another thread, a lost worker).
What is left here is the hand-out: the batch's position as its tag, its error or the
``TooManyErrors`` its records crossed raised at its place, pinning. Yields ``(tag, batch)`` as
the in-process graph does. (An ``IterableDataset``'s epoch: ``turns.TurnsEpoch``.)"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import datapipes as dp
from datapipes.dispatch import Dispatcher, DispatchSettings
from torch_threadloader.processes.errors import WorkerProcessError, raised_in, unpack_error
from torch_threadloader.processes.messages import BatchFailed
from torch_threadloader.processes.pool import NAME, WorkerProcesses
from torch_threadloader.processes.transport import Delivery, ProcessTransport, release
from torch_threadloader.tags import tag_error

if TYPE_CHECKING:
    from torch_threadloader.processes.graph import ProcessGraph

__all__ = ["ProcessEpoch", "open_processes"]


def open_processes(node: ProcessGraph) -> tuple[WorkerProcesses, WorkerProcesses | None, list[Any], int]:
    """The epoch's processes (the loader's, or its own when another live epoch has them),
    started now where needed, and the epoch's number: ``(pool, own, children, epoch)``."""
    pool, own = node.pool.for_epoch()
    try:
        return pool, own, pool.started(), next(pool.epochs)
    except BaseException:
        release(pool, own, 0, warn=False)
        raise


class _Batches(dp.NodeIterator[Any]):
    """The epoch's sampler as the dispatcher's source; its end tells the children."""

    def __init__(self, sampler: dp.NodeIterator[Any], transport: ProcessTransport) -> None:
        self.sampler = sampler
        self.transport = transport

    def __next__(self) -> Any:
        try:
            return next(self.sampler)
        except StopIteration:
            self.transport.no_more()
            raise

    def state_dict(self) -> dp.StateDict:
        return self.sampler.state_dict()

    def close(self) -> None:
        self.sampler.close()


class ProcessEpoch(dp.NodeIterator[Any]):
    """One epoch of a map-style or async dataset over the worker processes.

    Bound: a child holds at most its graph's ``capacity`` batches plus one being handed over;
    at most ``P * (capacity + 1)`` batches are sent and not yet handed out (the dispatcher's
    capacity). Threads: the consumer's (its feed is inline); ``shutdown`` may come from
    another thread (the dispatcher's close: a waiting ``next()`` raises ``EpochClosedError``)."""

    def __init__(self, node: ProcessGraph, state: dp.StateDict | None) -> None:
        assert node.source is not None
        self._stats = node._stats
        self._finish = node.finish
        inputs = node.pool.inputs
        pool, own, children, epoch = open_processes(node)
        per_child = inputs.capacity + 1  # a child's graph pulls one more before it hands one over
        in_order = inputs.plan.in_order
        transport = self._transport = ProcessTransport(
            node, pool, own, children, epoch, in_order=in_order, per_child=per_child
        )
        try:
            self._sampler = node._open_source(state)
        except BaseException:
            release(pool, own, 0, warn=False)
            raise
        settings = DispatchSettings(
            NAME,
            capacity=len(children) * per_child,
            max_lead=sys.maxsize,  # as many as the capacity: the children's bound
            in_order=in_order,
            timeout=node.timeout,
            skip_errors=False,  # the children skip samples; a batch's error is raised
        )
        self._run: Dispatcher[Delivery] = Dispatcher(
            settings, _Batches(self._sampler, transport), (), transport, self._stats
        )

    def __next__(self) -> Any:
        try:
            delivery = self._run.next()
        except StopIteration:
            with self._run.lock:
                complete = not self._run.closed
            if complete:
                self._transport.wait_ends()
                self.close()
            raise
        except WorkerProcessError:
            with self._run.lock:
                closed = self._run.closed
            if closed:  # by another thread, which may be stopping the processes too
                raise dp.EpochClosedError(
                    f"{NAME}: the epoch was closed by another thread while next() waited"
                ) from None
            self.shutdown(0, warn=False)  # the epoch ends there
            raise
        return self._hand_out(delivery)

    def _hand_out(self, delivery: Delivery) -> Any:
        message, tag = delivery.message, delivery.position
        too_many = self._transport.handed_out(delivery)
        child = delivery.child
        del delivery
        if too_many is not None:  # as in one process: the batch that crossed the limit raises it
            tag_error(too_many, tag)
            cause = unpack_error(message.error) if isinstance(message, BatchFailed) else None
            del message  # e.g. every sample of it failed
            raise too_many from cause
        if isinstance(message, BatchFailed):
            exc = raised_in(message.error, f"{self._transport.children[child].describe()} for batch {tag}")
            tag_error(exc, tag)
            del message
            raise exc
        batch = message.batch
        del message
        if self._finish is not None:
            try:
                batch = self._finish(batch)
            except BaseException as exc:
                tag_error(exc, tag)
                raise
        return tag, batch

    def state_dict(self) -> dp.StateDict:
        return {"source": self._sampler.state_dict()}

    def close(self) -> None:
        self.shutdown()

    def shutdown(self, timeout: float | None = dp.DEFAULT_JOIN_TIMEOUT, *, warn: bool = True) -> bool:
        """End the epoch: the children stop its work (their processes stay for the next
        epoch, unless this epoch started its own: stopped within ``timeout``). In a forked
        child of the process that opened it, only forgets it (the dispatcher's pid check):
        the epoch, its pipes and its processes are the parent's."""
        self._run.shutdown(timeout, warn=warn)
        return True
