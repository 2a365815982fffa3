"""Every suite of ``python -m benchmarks SUITE``: its module, the arguments it starts with, and
what it measures, in one line.

An alias names a module with preset arguments: a suite that was folded into another one keeps
its name (``stats_cost`` is ``option_cost --option stats``).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["SUITES", "Suite", "invoke"]


@dataclass(frozen=True)
class Suite:
    name: str
    module: str
    description: str
    args: tuple[str, ...] = ()


_SUITES = (
    Suite("run", "run", "the harness: every workload, ThreadLoader beside torch's DataLoader (the published run)"),
    Suite("per_batch", "per_batch", "num_workers=0's per-batch path beside a plain loop, torch and a lean loop"),
    Suite("overhead_floor", "per_batch", "alias of per_batch: num_workers=0 per batch beside torch and a lean loop"),
    Suite("number_batches", "number_batches", "per-batch costs of index batches and number collation; tensor kinds"),
    Suite("epoch_start", "epoch_start", "where a later epoch's first batch waits (persistent workers)"),
    Suite("epoch_kernel_time", "epoch_kernel_time", "kernel time and page faults per epoch in the harness's run"),
    Suite("step_wait", "step_wait", "the training step's wait: next() after a step, p50/p90/p99, beside a queue"),
    Suite("stragglers", "stragglers", "defer_stragglers beside in_order True/False and torch, heavy-tailed items"),
    Suite("batch_by_cost", "batch_by_cost", "max_batch_cost beside a fixed batch_size: useful tokens/s, same peak"),
    Suite("handoff", "handoff", "a tiny batch handed from 2 worker threads: wall, CPU, context switches"),
    Suite("handoff_rs", "handoff", "the handoff for dataloader-rs (CPython >= 3.13, no torch)", ("--dataloader-rs",)),
    Suite("option_cost", "option_cost", "ThreadLoader switches on beside off, interleaved (--option to pick)"),
    Suite("stats_cost", "option_cost", "what stats=True costs per item", ("--option", "stats")),
    Suite(
        "worker_state",
        "option_cost",
        "what per_sample_rng=True and worker_copy='deep' cost",
        ("--option", "per_sample_rng,worker_copy"),
    ),
    Suite(
        "random_state_cost",
        "option_cost",
        "what each worker's own global random state (own_random_state) costs",
        ("--option", "own_random_state"),
    ),
    Suite("skip_cost", "skip_cost", 'on_error="skip": epoch 1 beside epoch 12, 2,000 skips each'),
    Suite("resume_cost", "resume_cost", "state_dict() time and size in an out-of-order epoch; a resume's seek"),
    Suite("byte_budget", "byte_budget", "max_bytes_in_flight: RSS growth, tracked peak, throughput (fresh processes)"),
    Suite("intraop_threads", "intraop_threads", "one intra-op thread per worker thread against N (fresh processes)"),
    Suite("allocator", "allocator", "glibc, glibc tuned, jemalloc, tcmalloc (fresh processes)"),
    Suite("images_buffers", "images_buffers", "BufferedCollate against default_collate: page faults, time per batch"),
    Suite("images_draws", "images_draws", "the CPU of per-sample random draws (sample_draws) in v2 transforms"),
    Suite("images_ceiling", "images_ceiling", "the JPEG training pipeline on two plain threads beside ThreadLoader"),
    Suite(
        "processes", "processes", "worker_processes beside threads and torch: throughput, first batch, jitter, memory"
    ),
    Suite("freethreaded", "freethreaded", "threads against processes on this interpreter (GIL or free-threaded)"),
    Suite(
        "remote_throughput", "remote_throughput", "HttpDataset, S3Dataset, FsspecDataset beside bare clients and torch"
    ),
    Suite("hardening_cost", "hardening_cost", "the remote datasets' hardening: CPU per GET, per synchronous check"),
    Suite(
        "ray_data_last_mile",
        "ray_data_last_mile",
        "Ray Data's map + iter_torch_batches against ThreadLoader's last mile",
    ),
    Suite("profile_case", "profile_case", "one configuration of one case, epoch after epoch, for a profiler"),
    Suite(
        "profile_summary",
        "profile_summary",
        "a py-spy raw profile: functions by inclusive and self share (--by-library for native profiles)",
    ),
)

#: Every suite by name, in the order ``--list`` shows them.
SUITES: dict[str, Suite] = {s.name: s for s in _SUITES}


def invoke(name: str, argv: Sequence[str]) -> int:
    """Run suite ``name`` with command-line arguments ``argv``; its exit status."""
    suite = SUITES[name]
    module = importlib.import_module(f"benchmarks.{suite.module}")
    status: int | None = module.main([*suite.args, *argv], suite=name)
    return status or 0
