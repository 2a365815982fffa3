"""A ThreadLoader's checkpoint: what ``state_dict()`` holds and how an epoch keeps it.

The state is plain Python data (``int``, ``bool``, ``str``, ``bytes``, lists, dicts), so
``torch.save`` / ``torch.load(weights_only=True)`` round-trip it. What it records depends on
the dataset kind, each with its strategy (``strategy.py``, chosen once from the loader's plan;
see ``docs/architecture.md``, "Resume"):

* map-style (sync or async, ``sampled.py``): the epoch's random state (or the sampler's own
  ``state_dict()``), and the *positions* in the epoch's order of the batches delivered.
* IterableDataset (``iterable.py``): per worker, the batches it delivered (and the dataset
  copy's own ``state_dict()`` after its last one), and which worker is next in turn.
* ``datapipes`` graph (``node.py``): the graph's state after the last batch delivered.

The epoch's record (``record.py``) holds its ledger (``ledgers.py``), owned by the epoch's
consumer thread; the loader reads it under its lock. Beside them: the generators a state puts
back (``generators.py``), the epoch's order (``order.py``), the arguments a state depends on
(``config.py``), and the ranks of a process group (``ranks.py``).
"""

from __future__ import annotations

from torch_threadloader.resume.config import WORLD_DEPENDENT, check_config, loader_config
from torch_threadloader.resume.data import (
    FORMAT,
    as_tensor_state,
    encode_ranges,
    is_stateful,
    plain,
    snapshot,
)
from torch_threadloader.resume.fetcher import find_prefetching_fetcher, held_by
from torch_threadloader.resume.generators import (
    drawn_at_iter,
    draws_from_global,
    global_rng_of,
    order_rngs,
    replay_epoch,
    replay_order,
    restore_generators,
    sampler_generator,
    stateful_sampler,
    uses_global_rng,
)
from torch_threadloader.resume.iterable import total_workers
from torch_threadloader.resume.ledgers import RECENT, IterableLedger, NodeLedger, PositionLedger, SampleLedger
from torch_threadloader.resume.order import (
    keep_sampler_epoch,
    replay_batches,
    sampler_resume,
    sampler_state_in,
)
from torch_threadloader.resume.ranks import gather_ranks, pick_rank, reshard
from torch_threadloader.resume.record import EpochRecord
from torch_threadloader.resume.strategy import Progress, StateRules

__all__ = [
    "EpochRecord",
    "FORMAT",
    "IterableLedger",
    "NodeLedger",
    "PositionLedger",
    "Progress",
    "RECENT",
    "SampleLedger",
    "StateRules",
    "WORLD_DEPENDENT",
    "as_tensor_state",
    "check_config",
    "drawn_at_iter",
    "draws_from_global",
    "encode_ranges",
    "find_prefetching_fetcher",
    "gather_ranks",
    "global_rng_of",
    "held_by",
    "is_stateful",
    "keep_sampler_epoch",
    "loader_config",
    "order_rngs",
    "pick_rank",
    "plain",
    "replay_batches",
    "replay_epoch",
    "replay_order",
    "reshard",
    "restore_generators",
    "sampler_generator",
    "sampler_resume",
    "sampler_state_in",
    "snapshot",
    "stateful_sampler",
    "total_workers",
    "uses_global_rng",
]
