"""``max_batch_cost``: an epoch's batches cut after loading, by the samples' cost, not their count.

The graph (map-style, sync or async; the samples of straggler mode's graph, in order)::

    Sampler(FlatIndices(batches), positions=True)  # (sample position, index), the epoch's order
      -> Mapper (num_workers=0) / ThreadMapper / AsyncFetcher (in order: one sample per call)
         or worker processes' ProcessGraph (each sample a batch of one, with its index)
      -> CostBatcher(max_batch_cost, sample_cost, batch_size, cost_mode, group_window, agree)
      -> Mapper(collate)                            # ((positions...), batch) in the caller's thread

The sample order is the batch sampler's batches flattened (``kinds.stragglers.FlatIndices``):
torch's draws, and with ``drop_last`` torch's samples left out. The samples are loaded in that
order (``in_order=False`` too: the cut needs the order, so the batches are the same), and each
batch carries its samples' positions, which the epoch's ledger records
(``resume.ledgers.SampleLedger``): a resumed epoch loads exactly the samples not yet delivered,
and cuts them as the whole epoch would (windows are by position).

Ranks in step: with a ``DistributedSampler`` and an initialized default process group (or
``cost_sync=True``), every batch's size is agreed by one ``all_reduce(MIN)`` of one int64 in
``next()`` (the caller's thread, in the same order on every rank): each rank offers the samples
it would take and all take the fewest, so every rank cuts as many batches, each within its budget.

An ``IterableDataset`` has no positions: each worker cuts its own stream
(``kinds.cost_stream``, built by ``kinds.iterable``; in worker processes, by the same code in
the process that reads it), and with ``cost_sync=True`` the ranks step together through
:class:`InStep` (one ``all_reduce(MIN)`` of "has a batch" per ``next()``, in this process).

Bounds: the samples loading or loaded ahead are straggler mode's ``capacity`` (the batches'
worth the loader holds without the mode), plus the ``group_window`` being sorted and the sorted
samples not yet cut.
"""

from __future__ import annotations

import operator
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, SupportsIndex, TypeVar, cast

import torch

import datapipes as dp
from datapipes._sync import SyncIterator
from torch_threadloader.kinds._shared import resumed
from torch_threadloader.kinds.cost_stream import CostSettings, sample_name
from torch_threadloader.kinds.positive import positive_or_none
from torch_threadloader.kinds.spec import EpochSpec
from torch_threadloader.kinds.stragglers import (
    Cut,
    FlatIndices,
    Ready,
    collate_ready,
    sample_async,
    sample_plain,
    sample_threads,
)
from torch_threadloader.over_budget import BatchCostWarning, OverBudgetRecord
from torch_threadloader.plan import Kind
from torch_threadloader.tags import WorkerTag, tag_error
from torch_threadloader.userdata import Batch, Index, Indices, Sample

if TYPE_CHECKING:
    from torch_threadloader.inputs import EpochInputs
    from torch_threadloader.kinds.base import KindStrategy
    from torch_threadloader.plan import Settings

_T = TypeVar("_T")

__all__ = [
    "InStep",
    "SampleBatches",
    "build_async",
    "build_plain",
    "build_processes",
    "build_threads",
    "check_cost_mode",
    "check_cost_settings",
    "check_cost_sync",
    "check_group_window",
    "check_max_batch_cost",
    "check_sample_cost",
    "checked_cost",
    "cost_settings",
    "in_step",
    "over_budget_taker",
    "rank_agreement",
]


def check_max_batch_cost(value: object) -> int | None:
    """``max_batch_cost``: None, or a positive int (``TypeError``/``ValueError`` naming it)."""
    return positive_or_none(
        value,
        "max_batch_cost must be a positive int or None, got {value!r} ({kind})",
        "max_batch_cost must be a positive int (>= 1), got {value!r}",
    )


def check_sample_cost(value: object) -> Callable[[Sample], int] | None:
    """``sample_cost``: None, or a callable (``TypeError`` naming it)."""
    if value is not None and not callable(value):
        raise TypeError(f"sample_cost must be a callable (sample -> int) or None, got {value!r}")
    return value


def check_cost_mode(value: object) -> str:
    """``cost_mode``: one of ``datapipes.COST_MODES`` (``ValueError`` naming it)."""
    if value not in dp.COST_MODES:
        raise ValueError(f"cost_mode must be one of {', '.join(map(repr, dp.COST_MODES))}, got {value!r}")
    return str(value)


def check_group_window(value: object) -> int | None:
    """``group_window``: None, or a positive int of samples (``TypeError``/``ValueError`` naming it)."""
    return positive_or_none(
        value,
        "group_window must be a positive int (samples) or None, got {value!r}",
        "group_window must be a positive int (samples), got {value!r}",
    )


def check_cost_sync(value: object) -> bool | None:
    """``cost_sync``: None (automatic), True or False (``TypeError`` naming it)."""
    if value is not None and not isinstance(value, bool):
        raise TypeError(f"cost_sync must be None (automatic), True or False, got {value!r}")
    return value


def check_cost_settings(loader: Settings, strategy: KindStrategy, *, skips: bool) -> None:
    """Refuse, naming the argument, the cost settings that do not go together or with the rest."""
    if loader.max_batch_cost is None:
        given = [
            name
            for name, value, default in (
                ("sample_cost", loader.sample_cost, None),
                ("group_window", loader.group_window, None),
                ("cost_mode", loader.cost_mode, "sum"),
                ("cost_sync", loader.cost_sync, None),
            )
            if value != default
        ]
        if given:
            raise ValueError(f"{', '.join(given)} needs max_batch_cost: batches are cut by cost only with a budget")
        return
    if loader.sample_cost is None:
        raise ValueError("max_batch_cost needs sample_cost, a callable giving each loaded sample's cost (an int)")
    why = _refusal(loader, strategy, skips=skips)
    if why is not None:
        raise ValueError(f"max_batch_cost does not apply to {why}")


def _refusal(loader: Settings, strategy: KindStrategy, *, skips: bool) -> str | None:
    if strategy.kind is Kind.NODE:
        return (
            "a datapipes graph as the dataset: the graph owns its order and its batches; put a CostBatcher in the graph"
        )
    if strategy.kind is Kind.ITERABLE:
        why = _iterable_refusal(loader)
        if why is not None:
            return why
    refusals = (
        (
            loader.batch_size is None,
            "batches cut by a batch_sampler (or batch_size=None): the loader cuts each batch by cost, so the batches "
            "cannot be the batch_sampler's; give sampler= and batch_size= (the most samples a batch takes)",
        ),
        (loader.defer_stragglers, "defer_stragglers=True: a batch is cut by cost in the epoch's order; choose one"),
        (
            strategy.per_item_threads and loader.num_workers == 0 and loader.item_concurrency > 1,
            f"item_concurrency={loader.item_concurrency} with num_workers=0: each sample is loaded in next() as the "
            "cut needs it; set num_workers (threads load the samples ahead) or leave item_concurrency=1",
        ),
        (skips, f"on_error={loader.on_error!r}: a failed sample is raised at its place; leave on_error='raise'"),
        (
            loader.max_bytes_in_flight is not None,
            "max_bytes_in_flight: the prefetch and group_window bound what is loaded; leave it None",
        ),
    )
    return next((why for refused, why in refusals if refused), None)


def _iterable_refusal(loader: Settings) -> str | None:
    """Why an ``IterableDataset`` cut by cost (each worker its own stream) cannot take ``loader``'s settings."""
    if loader.batch_size is None:
        return (
            "an IterableDataset with batch_size=None: each worker cuts its stream by cost, batch_size is the most "
            "samples a batch takes; give batch_size="
        )
    return None


def rank_agreement(inputs: EpochInputs) -> Callable[[int], int] | None:
    """The function that agrees each batch's size across the ranks (``all_reduce(MIN)`` over
    the default process group), or None: ``cost_sync=False``, or None (automatic) without an
    initialized default group of more than one rank or without a ``DistributedSampler``."""
    sync = inputs.plan.cost_sync
    if sync is False:
        return None
    ready = torch.distributed.is_available() and torch.distributed.is_initialized()
    if sync is None and not (ready and isinstance(inputs.sampler, torch.utils.data.DistributedSampler)):
        return None
    if not ready:
        raise RuntimeError(
            "cost_sync=True needs torch.distributed's default process group initialized before iter(loader)"
        )
    if torch.distributed.get_world_size() < 2:
        return None
    backend = str(torch.distributed.get_backend())
    device = torch.device("cuda", torch.cuda.current_device()) if "nccl" in backend else torch.device("cpu")

    def agree(size: int) -> int:
        count = torch.tensor([size], dtype=torch.int64, device=device)
        torch.distributed.all_reduce(count, op=torch.distributed.ReduceOp.MIN)
        return int(count.item())

    return agree


def _costed(sample_cost: Callable[[Sample], int]) -> Callable[[Ready], int]:
    """``sample_cost`` of a loaded sample, checked: a non-negative int, else an error naming the
    sample's index (tagged with its position: it stands for the sample, as a fetch error does)."""

    def cost(item: Ready) -> int:
        position, (index, value) = item
        try:
            return checked_cost(sample_cost(value), f"the sample at index {index!r}")
        except BaseException as exc:
            exc.add_note(f"[threadloader] raised by sample_cost for the sample at index {index!r}")
            tag_error(exc, (position,))
            raise

    return cost


def checked_cost(value: object, sample: str) -> int:
    """``sample_cost``'s ``value`` for ``sample`` (in words), as an int: a ``TypeError`` or
    ``ValueError`` naming the sample unless it is a non-negative int."""
    if isinstance(value, bool):
        raise TypeError(f"sample_cost must return a non-negative int; for {sample} it gave {value!r}")
    try:
        cost = operator.index(cast(SupportsIndex, value))  # a TypeError unless it has __index__
    except TypeError:
        raise TypeError(
            f"sample_cost must return a non-negative int; for {sample} it gave {value!r} ({type(value).__name__})"
        ) from None
    if cost < 0:
        raise ValueError(f"sample_cost must return a non-negative int; for {sample} it gave {cost}")
    return cost


class SampleBatches:
    """The epoch's index batches flattened, each sample as a batch of its own (what worker
    processes load: this process cuts them by cost). ``sampler`` is the batches' iterable."""

    def __init__(self, batches: Iterable[Indices]) -> None:
        self.sampler = batches

    def __iter__(self) -> Iterator[list[Index]]:
        return ([index] for index in FlatIndices(self.sampler))


def _position(item: Ready) -> int:
    return item[0]


def _batched(spec: EpochSpec, samples: dp.Node[Ready], depth: int = 3) -> dp.Node[Cut]:
    plan, inputs = spec.plan, spec.inputs
    assert plan.max_batch_cost is not None and inputs is not None and inputs.sample_cost is not None
    log, max_cost = inputs.state.over_budget, plan.max_batch_cost
    epoch = spec.policy.epoch if spec.policy is not None else 0

    def over(item: Ready, cost: int) -> None:
        log.add(item[1][0], cost, epoch, max_cost)

    cut = dp.CostBatcher(
        samples,
        max_cost,
        _costed(inputs.sample_cost),
        batch_size=plan.batch_size,
        mode=plan.cost_mode,
        group_window=plan.group_window,
        key=_position,
        agree=rank_agreement(inputs),
        on_over=over,
        name="threadloader-cost",
    )
    return resumed(dp.Mapper(cut, collate_ready(spec), name="threadloader-collate"), spec, depth)


def cost_settings(spec: EpochSpec) -> CostSettings:
    """The cut's settings for an ``IterableDataset``'s workers (each cuts its own stream, in
    this process or in a worker process)."""
    plan = spec.plan
    assert plan.max_batch_cost is not None and plan.batch_size is not None and spec.sample_cost is not None
    return CostSettings(
        max_cost=plan.max_batch_cost,
        sample_cost=spec.sample_cost,
        checked=checked_cost,
        batch_size=plan.batch_size,
        mode=plan.cost_mode,
        group_window=plan.group_window,
        over=spec.over_budget,
        epoch=spec.policy.epoch if spec.policy is not None else 0,
    )


def over_budget_taker(spec: EpochSpec) -> Callable[[Sequence[OverBudgetRecord]], None]:
    """What takes in the over-budget records a worker process made cutting an
    ``IterableDataset``'s streams for this epoch (``spec``, the loader's): each is recorded in
    the loader's log as this epoch's (its warning, once per epoch, raised here)."""
    settings = cost_settings(spec)

    def where(index: Index) -> str | None:
        return sample_name(*index) if isinstance(index, tuple) and len(index) == 2 else None

    def take(records: Sequence[OverBudgetRecord]) -> None:
        settings.over.merge(records, settings.epoch, settings.max_cost, where)

    return take


def in_step(spec: EpochSpec, graph: dp.Node[_T]) -> dp.Node[_T]:
    """An ``IterableDataset``'s graph cut by cost, its ``next()`` in step across the ranks
    (:class:`InStep`) when they agree each batch (``cost_sync``), else ``graph``."""
    inputs = spec.inputs
    agree = rank_agreement(inputs) if spec.plan.max_batch_cost is not None and inputs is not None else None
    return graph if agree is None else InStep(graph, agree)


class InStep(dp.Node[_T]):
    """An ``IterableDataset``'s epoch cut by cost, each ``next()`` in step across the ranks
    (``cost_sync=True``): it offers ``agree`` 1 (a batch, or a batch's error: a step either way)
    or 0 (this rank's streams ended), and every rank takes the fewest (``all_reduce(MIN)``), so
    the epoch ends on every rank at the first one's end. A rank that ends so with batches left
    warns it (``BatchCostWarning``): the rest of its streams is left out of this epoch."""

    def __init__(self, source: dp.Node[_T], agree: Callable[[int], int]) -> None:
        super().__init__(source, name="threadloader-in-step")
        self.agree = agree

    def _open(self, state: dp.StateDict | None) -> dp.NodeIterator[_T]:
        return _InStepIterator(self, state)


class _InStepIterator(SyncIterator[_T]):
    _node: InStep[_T]

    def __init__(self, node: InStep[_T], state: dp.StateDict | None) -> None:
        super().__init__(node, state)
        self._steps = 0

    def _next(self) -> _T:
        error: Exception | None = None
        item: _T | None = None
        have = 1
        try:
            item = self._pull()
        except StopIteration:
            have = 0
        except Exception as exc:  # a failed batch is this rank's step too: agreed, then raised
            error = exc
        if self._node.agree(have) == 0:
            if have:
                warnings.warn(
                    f"cost_sync=True: another rank's IterableDataset ended its epoch at this rank's batch {self._steps} "
                    "of this iter(); this rank's ends there too (the rest of its stream is left out of this epoch, so "
                    "that no rank waits alone in a collective)",
                    BatchCostWarning,
                    stacklevel=2,
                )
            raise StopIteration
        self._steps += 1
        if error is not None:
            raise error
        return cast("_T", item)


def build_plain(spec: EpochSpec) -> dp.Node[Cut]:
    """``num_workers=0``: each sample loaded in the caller's thread as the cut needs it."""
    return _batched(spec, sample_plain(spec))


def build_threads(spec: EpochSpec, pool: dp.ThreadPool | None, *, feed_on_consumer: bool) -> dp.Node[Cut]:
    """Worker threads load the samples, in order, ahead of the cut."""
    return _batched(spec, sample_threads(spec, pool, feed_on_consumer=feed_on_consumer, in_order=True))


def build_processes(spec: EpochSpec, graph: dp.Node[tuple[int | WorkerTag | None, Batch]]) -> dp.Node[Batch]:
    """Worker processes load the samples (``graph``: ``(position, ([index], [sample]))``, each
    sample a batch of one with its index), in order, ahead of the cut in this process. An
    ``IterableDataset``'s workers cut their own streams in the worker processes: ``graph``
    yields their batches, stepped here across the ranks (:func:`in_step`)."""
    if spec.plan.kind is Kind.ITERABLE:
        return in_step(spec, graph)

    def ready(tagged: tuple[int | WorkerTag | None, Batch]) -> Ready:
        position, (indices, samples) = tagged
        assert isinstance(position, int)
        return position, (indices[0], samples[0])

    return _batched(spec, dp.Mapper(graph, ready, name="threadloader-samples"), 4)


def build_async(spec: EpochSpec, loop: dp.EventLoopThread) -> dp.Node[Cut]:
    """An async dataset's samples awaited on the loop, in order, ahead of the cut."""
    return _batched(spec, sample_async(spec, loop, in_order=True))
