"""Resume of a map-style or async dataset: the positions of the sampler's order delivered.

A state holds the epoch's random state (or the sampler's own ``state_dict()``), and the
*positions* in the epoch's order of the batches delivered: every one below ``frontier``, and
``done`` (ranges ``[start, stop)``) above it. Global, not per worker: a resume may change
``num_workers``, ``item_concurrency`` and ``in_order``. With ``defer_stragglers=True`` the
positions are those of the *samples* in the epoch's order (the batch sampler's batches,
flattened), delivered in the batches they finished in (``SampleLedger``); a resume may
change ``num_workers``, ``item_concurrency`` and ``straggler_window`` there. With
``max_batch_cost`` too (the batches cut by cost): a resume may change ``num_workers``,
``item_concurrency`` and ``in_order``, and cuts the rest as the whole epoch would.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import datapipes as dp
from torch_threadloader.resume.data import OwnState, RngState, plain, snapshot
from torch_threadloader.resume.generators import Eager, generators_of, sampler_generator, stateful_sampler
from torch_threadloader.resume.ledgers import DeliveredPositions, PositionLedger, SampleLedger
from torch_threadloader.resume.order import SamplerOrder, describe_sampler_order, sampler_state_in
from torch_threadloader.resume.strategy import Progress, StateRules

if TYPE_CHECKING:
    from torch_threadloader.inputs import EpochInputs
    from torch_threadloader.skip import ErrorRecord

__all__ = ["SampledProgress", "SampledState"]


class SampledState(StateRules):
    """Map-style (``Kind.MAP``) and async (``Kind.ASYNC``) datasets: items read by index from
    the loader's sampler; progress by the positions of the epoch's order delivered."""

    uses_sampler = True
    #: The kind's batches may finish out of order even without workers (async: one loop).
    out_of_order = False

    def sample_total(self, inputs: EpochInputs) -> int | None:
        """The epoch's samples, for progress kept per sample (``defer_stragglers``)."""
        raise NotImplementedError

    def order(self, inputs: EpochInputs) -> SamplerOrder | None:
        return describe_sampler_order(inputs)

    def config(self, inputs: EpochInputs) -> dp.StateDict:
        config: dp.StateDict = {
            "sampler": type(inputs.sampler).__name__,
            "batch_sampler": type(inputs.batch_sampler).__name__ if inputs.batch_sampler is not None else None,
        }
        try:
            config["batches"] = len(inputs.index_sampler)
        except TypeError:
            config["batches"] = None
        try:
            config["samples"] = len(inputs.dataset)
        except Exception:  # no length (a custom sampler needs none): not compared
            config["samples"] = None
        # Where the order and the base seeds are drawn from, and how (torch's samplers).
        if inputs.plan.defer_stragglers:  # positions of samples, not batches (absent: False)
            config["defer_stragglers"] = True
        if inputs.plan.max_batch_cost is not None:  # positions of samples, cut by cost (absent: off)
            config["max_batch_cost"] = inputs.plan.max_batch_cost
            config["cost_mode"] = inputs.plan.cost_mode
            config["group_window"] = inputs.plan.group_window
        config["generator"] = inputs.generator is not None
        config["sampler_generator"] = sampler_generator(inputs.index_sampler) is not None
        order = self.order(inputs)
        if order is not None:  # the rank's own place is no argument: it may change (reshard)
            config["order"] = {k: v for k, v in order.items() if k not in ("rank", "num_replicas", "epoch")}
        return config

    def sampler_state(self, inputs: EpochInputs) -> dict[str, OwnState]:
        stateful = stateful_sampler(inputs)
        return {"sampler_state": snapshot(stateful.state_dict(), stateful)} if stateful is not None else {}

    def progress(
        self,
        inputs: EpochInputs,
        resume: dp.StateDict | None,
        *,
        total: int | None,
        eager: Eager | None,
        indices: object,
        iterable_start: Sequence[OwnState] | None,
    ) -> SampledProgress:
        # Batches that may come out of order carry their position (also from worker processes);
        # a skipped sample's record names its batch.
        tagged = (
            self.out_of_order or inputs.plan.num_workers > 0 or bool(inputs.plan.worker_processes) or inputs.plan.skips
        )
        if inputs.plan.defer_stragglers or inputs.plan.max_batch_cost is not None:
            return SampledProgress(
                self, resume, tagged=True, total=self.sample_total(inputs), eager=eager, indices=indices, samples=True
            )
        if total is None:
            try:
                total = len(inputs.index_sampler)
            except TypeError:
                total = None
        return SampledProgress(self, resume, tagged=tagged, total=total, eager=eager, indices=indices)


class SampledProgress(Progress):
    """A map-style epoch's positions delivered, and the random states its order is drawn from."""

    reads_graph = True

    def __init__(
        self,
        strategy: SampledState,
        resume: dp.StateDict | None,
        *,
        tagged: bool,
        total: int | None,
        eager: Eager | None,
        indices: object,
        samples: bool = False,
    ) -> None:
        self.strategy = strategy
        self.tagged = tagged
        ledger = SampleLedger if samples else PositionLedger
        self.ledger: PositionLedger = ledger(resume["frontier"], resume["done"]) if resume else ledger()
        self.rng: RngState | None = resume["rng"] if resume else None
        # torch's global generator at the order's draw, for a sampler with its own generator.
        self.rng_global: RngState | None = resume.get("rng_global") if resume else None
        self.drawn = bool(resume.get("drawn", True)) if resume else True
        # The random states an order drawn at iter() (a sampler whose __iter__ draws at
        # once) was drawn from; the graph's Sampler only sees them after the draw.
        self.eager = dict(eager) if eager else None
        # The epoch's started index iterable: has the Sampler pulled it (drawn the order)?
        self.indices = indices
        self.total = total

    def graph_part(self, graph_state: dp.StateDict) -> dp.StateDict:
        return sampler_state_in(graph_state)

    def closed(self, part: dp.StateDict) -> None:
        """Keep what the graph says of the sampler now (a closed sampler forgets the positions
        it was to pass over)."""
        self.rng = part["rng"]
        self.rng_global = part.get("global_rng")
        self.drawn = bool(part.get("drawn", True))
        if not self.tagged:
            self.ledger.set_in_order(int(part["yielded"]), part.get("skip", ()))

    def running(self, state: dp.StateDict, held: int, graph_state: dp.StateDict | None, inputs: EpochInputs) -> bool:
        rng, rng_global = self.rng, self.rng_global
        if graph_state is not None:
            sampler = sampler_state_in(graph_state)
            rng, rng_global = sampler["rng"], sampler.get("global_rng")
            # A ThreadMapper's state before its first batch is its sampler's before
            # the order was drawn; the draw may have happened since (its prefetch).
            state["drawn"] = bool(sampler.get("drawn", True)) or self._order_started()
            if not self.tagged:
                self.ledger.set_in_order(int(sampler["yielded"]), sampler.get("skip", ()))
        else:
            state["drawn"] = self.drawn
        if self.eager is not None:
            state["drawn"], state["eager"] = True, self.eager
        positions = self.ledger.state(held)
        state.update(positions)
        state["rng"] = plain(rng)
        if rng_global is not None:
            state["rng_global"] = plain(rng_global)
        records = self.errors.this_epoch() if self.errors is not None else []
        state["errors"] = _delivered_errors(records, positions)
        return self.total is not None and positions["frontier"] >= self.total

    def finished(self, ended: dp.StateDict, inputs: EpochInputs) -> dp.StateDict:
        # A sampler generator's end state is not read now (without workers nothing has read
        # past the last batch, and torch's RandomSampler makes a last draw when its iterator
        # ends): loading replays the epoch from its start (its "rng").
        state: dp.StateDict = {"config": ended["config"], "finished": True}
        state.update(generators_of(inputs))
        state["rng"] = ended.get("rng")
        if ended.get("eager"):
            state["eager"] = ended["eager"]
        state.update(self.strategy.sampler_state(inputs))
        return state

    def _order_started(self) -> bool:
        started = getattr(self.indices, "started", None)
        return bool(started() if callable(started) else False)


def _delivered_errors(records: list[ErrorRecord], positions: DeliveredPositions) -> list[ErrorRecord]:
    """The skip records of batches delivered (a batch still loading is loaded again on resume)."""
    frontier = int(positions["frontier"])
    done = [(int(a), int(b)) for a, b in positions["done"]]

    def delivered(batch: int | str | None) -> bool:
        if batch is None:
            return True
        return isinstance(batch, int) and (batch < frontier or any(a <= batch < b for a, b in done))

    return [{k: v for k, v in r.items() if k != "epoch"} for r in records if delivered(r.get("batch"))]
