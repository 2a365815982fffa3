"""One epoch in the loader's process when its work runs in worker processes: the
:class:`~datapipes.dispatch.Dispatcher` over a transport of the children (the one dispatcher of
every concurrent mode: dispatch, reorder, bound, ``timeout``, a close from any thread, Ctrl-C,
a lost worker). :class:`ChildrenEpoch` is what is left for an epoch to do, the same for both:
a complete epoch takes the children's ends, a lost child ends the epoch, a batch's error is
raised at its place and ``finish`` (pinning) runs on the batch. :class:`ProcessEpoch` is a
map-style or async dataset's (the batch's position as its tag, the ``TooManyErrors`` its records
crossed); an ``IterableDataset``'s is ``turns.TurnsEpoch``. Each yields ``(tag, batch)`` as the
in-process graph does."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Generic, NoReturn, TypeVar

import datapipes as dp
from datapipes.dispatch import Dispatcher, DispatchSettings
from torch_threadloader.processes.errors import PackedError, WorkerProcessError, raised_in, unpack_error
from torch_threadloader.processes.messages import BatchFailed, BatchTag, TaggedBatch
from torch_threadloader.processes.pool import NAME, ChildHandle, WorkerProcesses
from torch_threadloader.processes.transport import ChildrenTransport, Delivery, ProcessTransport, release
from torch_threadloader.tags import tag_error
from torch_threadloader.userdata import Batch, Index

if TYPE_CHECKING:
    from torch_threadloader.processes.graph import ProcessGraph

__all__ = ["ChildrenEpoch", "ProcessEpoch", "open_processes"]

#: What the dispatcher hands the epoch for one batch (the transport's ``OK`` value).
D = TypeVar("D")
#: The epoch's transport.
T = TypeVar("T", bound=ChildrenTransport)


def open_processes(node: ProcessGraph) -> tuple[WorkerProcesses, WorkerProcesses | None, list[ChildHandle], int]:
    """The epoch's processes (the loader's, or its own when another live epoch has them),
    started now where needed, and the epoch's number: ``(pool, own, children, epoch)``."""
    pool, own = node.pool.for_epoch()
    try:
        return pool, own, pool.started(), next(pool.epochs)
    except BaseException:
        release(pool, own, 0, warn=False)
        raise


class ChildrenEpoch(dp.NodeIterator[TaggedBatch], Generic[D, T]):
    """One epoch over the worker processes: ``run``, the dispatcher over ``transport``, gives
    each batch (as ``D``) to :meth:`_hand_out`, which makes it ``(tag, batch)``.

    Errors: ``timeout``, a close from any thread (a waiting ``next()`` raises
    ``EpochClosedError``) and a lost child (``WorkerProcessError``, at the place of the batch it
    held) are the dispatcher's; a lost child also ends the epoch (its next ``next()`` raises
    ``StopIteration``), and one found while the epoch was being closed is that close.
    Ctrl-C in ``next()`` stops the epoch within the short bound. Threads: the consumer's;
    :meth:`shutdown` may come from any thread. In a forked child of the process that opened
    it, closing only forgets it (the dispatcher's pid check): the epoch, its pipes and its
    processes are the parent's."""

    def __init__(self, node: ProcessGraph, run: Dispatcher[D], transport: T) -> None:
        self._finish = node.finish
        self._run = run
        self._transport = transport

    def __next__(self) -> TaggedBatch:
        try:
            value = self._run.next()
        except StopIteration:
            with self._run.lock:
                complete = not self._run.closed
            if complete:
                self._transport.wait_ends()
                self.close()
            raise
        except WorkerProcessError:
            self.shutdown(0, warn=False)  # the epoch ends there
            raise
        except KeyboardInterrupt:
            self._run.interrupt()
            raise
        return self._hand_out(value)

    def _hand_out(self, value: D) -> TaggedBatch:
        raise NotImplementedError

    def _raise_failed(self, error: PackedError, where: str, tag: BatchTag) -> NoReturn:
        """A batch's error, raised as itself (noted where it was raised), tagged ``tag`` (an
        unknown batch's is not tagged)."""
        exc = raised_in(error, where)
        if tag is not None:
            tag_error(exc, tag)
        try:
            raise exc
        finally:
            del exc  # the frame the error's traceback holds must not hold the error (a cycle)

    def _finished(self, tag: BatchTag, batch: Batch) -> TaggedBatch:
        if self._finish is not None:
            try:
                batch = self._finish(batch)
            except BaseException as exc:
                if tag is not None:
                    tag_error(exc, tag)
                raise
        return tag, batch

    def close(self) -> None:
        self.shutdown()

    def shutdown(self, timeout: float | None = dp.DEFAULT_JOIN_TIMEOUT, *, warn: bool = True) -> bool:
        """End the epoch: the children stop its work (their processes stay for the next
        epoch, unless this epoch started its own: stopped within ``timeout``)."""
        self._run.shutdown(timeout, warn=warn)
        return True


class _Batches(dp.NodeIterator[tuple[int, Index]]):
    """The epoch's sampler (``(position, indices)``) as the dispatcher's source; its end tells
    the children."""

    def __init__(self, sampler: dp.NodeIterator[tuple[int, Index]], transport: ProcessTransport) -> None:
        self.sampler = sampler
        self.transport = transport

    def __next__(self) -> tuple[int, Index]:
        try:
            return next(self.sampler)
        except StopIteration:
            self.transport.no_more()
            raise

    def state_dict(self) -> dp.StateDict:
        return self.sampler.state_dict()

    def close(self) -> None:
        self.sampler.close()


class ProcessEpoch(ChildrenEpoch[Delivery, ProcessTransport]):
    """One epoch of a map-style or async dataset over the worker processes.

    Bound: a child holds at most its graph's ``capacity`` batches plus one being handed over;
    at most ``P * (capacity + 1)`` batches are sent and not yet handed out (the dispatcher's
    capacity)."""

    def __init__(self, node: ProcessGraph, state: dp.StateDict | None) -> None:
        assert node.source is not None
        inputs = node.pool.inputs
        pool, own, children, epoch = open_processes(node)
        per_child = inputs.capacity + 1  # a child's graph pulls one more before it hands one over
        in_order = inputs.plan.in_order or inputs.plan.max_batch_cost is not None  # a cut by cost needs the order
        transport = ProcessTransport(node, pool, own, children, epoch, in_order=in_order, per_child=per_child)
        try:
            self._sampler: dp.NodeIterator[tuple[int, Index]] = node._open_source(state)
        except BaseException:
            release(pool, own, 0, warn=False)
            raise
        settings = DispatchSettings(
            NAME,
            capacity=len(children) * per_child,
            max_lead=sys.maxsize,  # as many as the capacity: the children's bound
            in_order=in_order,
            timeout=node.timeout,
            stall=node.stall,
            skip_errors=False,  # the children skip samples; a batch's error is raised
        )
        run = Dispatcher[Delivery](settings, _Batches(self._sampler, transport), (), transport, node._stats)
        super().__init__(node, run, transport)

    def _hand_out(self, delivery: Delivery) -> TaggedBatch:
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
            error = message.error
            del message
            self._raise_failed(error, f"{self._transport.children[child].describe()} for batch {tag}", tag)
        batch = message.batch
        del message
        return self._finished(tag, batch)

    def state_dict(self) -> dp.StateDict:
        return {"source": self._sampler.state_dict()}
