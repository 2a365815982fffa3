"""The benchmark workloads, one module each, in the order they run and are reported.

Modules are imported on demand: each pulls in what its work needs (torchvision, aiohttp).
"""

from __future__ import annotations

import importlib

from benchmarks.harness import Workload

__all__ = ["NAMES", "load"]

#: Every workload, in run order.
NAMES: tuple[str, ...] = (
    "overhead",
    "local_files",
    "image_augment",
    "remote",
    "remote_http",
    "jpeg_pipeline",
    "python_cpu",
    "startup",
    "memory",
)


def load(name: str) -> Workload:
    """The workload called ``name`` (its module's ``WORKLOAD``)."""
    if name not in NAMES:
        raise ValueError(f"unknown workload {name!r}; choose from {', '.join(NAMES)}")
    workload: Workload = importlib.import_module(f"{__name__}.{name}").WORKLOAD
    return workload
