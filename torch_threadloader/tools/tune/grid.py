"""The grid ``bench`` runs: torch's ``num_workers``, ThreadLoader's ``num_workers`` and
``item_concurrency``, by default and as ``--grid KEY=V,V,...`` changes it."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from torch.utils.data import IterableDataset

from torch_threadloader.tools.tune.target import Target

__all__ = ["default_grid", "parse_grid", "usable_cpus"]

_GRID_KEYS = ("torch_num_workers", "num_workers", "item_concurrency")


def usable_cpus() -> int:
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def default_grid(target: Target | None = None, cpus: int | None = None) -> dict[str, list[int]]:
    """The grid: torch's ``num_workers`` 0, 2, 4 up to the CPUs; ThreadLoader's ``num_workers``
    1, 2, 4 (up to twice the CPUs: threads waiting on I/O may outnumber them) and
    ``item_concurrency`` 1 and 4; the loader's own settings added when the factory returned one."""
    cpus = cpus or usable_cpus()
    grid = {
        "torch_num_workers": [n for n in (0, 2, 4) if n <= cpus],
        "num_workers": [n for n in (1, 2, 4) if n <= max(2 * cpus, 2)],
        "item_concurrency": [1, 4],
    }
    if target is not None and isinstance(target.dataset, IterableDataset):
        grid["item_concurrency"] = [1]  # an iterable's items come from one iterator per worker
    if target is not None and target.source_num_workers is not None:
        key = "num_workers" if target.source == "ThreadLoader" else "torch_num_workers"
        grid[key] = sorted({*grid[key], target.source_num_workers})
        if target.source_item_concurrency is not None:
            grid["item_concurrency"] = sorted({*grid["item_concurrency"], target.source_item_concurrency})
    return grid


def parse_grid(items: Iterable[str], base: Mapping[str, list[int]]) -> dict[str, list[int]]:
    """``base`` with each ``KEY=V,V,...`` of ``items`` replacing its key (``torch_num_workers``,
    ``num_workers``, ``item_concurrency``). ``torch_num_workers=`` (empty) skips torch's
    DataLoader. Raises ``ValueError`` naming the item."""
    grid = {k: list(v) for k, v in base.items()}
    for item in items:
        key, sep, values = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in _GRID_KEYS:
            raise ValueError(f"--grid {item!r}: expected KEY=V,V,... with KEY one of {', '.join(_GRID_KEYS)}")
        try:
            numbers = [int(v) for v in values.split(",") if v.strip()]
        except ValueError:
            raise ValueError(f"--grid {item!r}: values must be integers, comma-separated") from None
        lowest = 1 if key == "item_concurrency" else 0
        if any(n < lowest for n in numbers):
            raise ValueError(f"--grid {item!r}: {key} values must be >= {lowest}")
        if not numbers and key != "torch_num_workers":
            raise ValueError(f"--grid {item!r}: give at least one value")
        grid[key] = sorted(set(numbers))
    return grid
