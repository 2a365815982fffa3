"""Runs one loader configuration over a big dataset in this (fresh) process and prints, as one
JSON line, the peak memory of the whole process tree: this process and every worker
process it forks.

Run by the harness as ``python -m benchmarks._memory_probe SPEC_JSON``.

What is measured (all from ``/proc``, Linux only):

* ``dataset_mib``: resident memory after the dataset is built minus before (the dataset
  itself).
* ``peak_tree_pss_mib``: the peak, sampled every 5 ms, of the sum of the proportional set
  size (PSS) of this process and all its descendants. PSS splits a page shared by several
  processes between them, so every page counts once: the memory the tree really uses.
* ``peak_tree_rss_mib``: the same with resident set size (RSS), which counts a page shared by
  a parent and its forked child once in each (so it overstates forked workers); this
  process's own peak here is the kernel's exact high-water mark (``VmHWM``, reset once the
  dataset is built).
* ``above_dataset_mib``, the headline: what loading costs on top of a process holding just
  the dataset; the larger of the tree's PSS peak above this process's PSS with the dataset,
  and this process's exact RSS peak above its RSS with the dataset (so a peak between two
  samples still counts for the main process). ``above_dataset_rss_mib``: the RSS-sum peak
  above the RSS with the dataset.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["MEMORY_METRICS", "main", "record"]

#: The figures of a probe's report that the suites record, in MiB.
MEMORY_METRICS = ("dataset_mib", "above_dataset_mib", "peak_tree_pss_mib", "peak_tree_rss_mib")

_SAMPLE_INTERVAL_S = 0.005


def _status_kib(pid: int | str, key: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0


def _pss_kib(pid: int | str) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
    return 0


def descendants(pid: int, exclude: Sequence[int] = ()) -> list[int]:
    """The live descendants of ``pid`` (Linux ``/proc``), leaving out the processes in
    ``exclude`` and everything under them."""
    found: list[int] = []
    stack = [pid]
    while stack:
        parent = stack.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                children = Path(f"/proc/{parent}/task/{tid}/children").read_text().split()
            except OSError:
                continue
            for child in map(int, children):
                if child in exclude:
                    continue
                found.append(child)
                stack.append(child)
    return found


class TreeSampler:
    """Samples RSS and PSS of this process's tree on a thread until :meth:`stop`."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.peak_rss_kib = 0
        self.peak_pss_kib = 0
        self.peak_children = 0
        self.child_hwm_kib: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memory-probe-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def sample(self) -> None:
        children = descendants(self.pid)
        rss = _status_kib(self.pid, "VmRSS")
        pss = _pss_kib(self.pid)
        for child in children:
            rss += _status_kib(child, "VmRSS")
            pss += _pss_kib(child)
            self.child_hwm_kib[child] = max(self.child_hwm_kib.get(child, 0), _status_kib(child, "VmHWM"))
        self.peak_rss_kib = max(self.peak_rss_kib, rss)
        self.peak_pss_kib = max(self.peak_pss_kib, pss)
        self.peak_children = max(self.peak_children, len(children))

    def _run(self) -> None:
        while not self._stop.wait(_SAMPLE_INTERVAL_S):
            self.sample()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()


def _reset_peak() -> bool:
    """Reset this process's ``VmHWM`` to its current RSS (Linux >= 4.0)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _make_loader(spec: dict[str, Any], dataset: Any) -> Any:
    import torch
    from torch.utils.data import DataLoader

    kwargs = {"batch_size": spec["batch_size"], **spec["loader_options"], **spec["options"]}
    seed = kwargs.pop("seed", None)
    if seed is not None:
        kwargs["generator"] = torch.Generator().manual_seed(int(seed))
    if spec["runner"] == "torch":
        return DataLoader(dataset, **kwargs)
    from torch_threadloader import ThreadLoader

    return ThreadLoader(dataset, **kwargs)


def probe(spec: dict[str, Any]) -> dict[str, Any]:
    """Build the dataset, run one epoch of the configured loader, report memory (see module)."""
    import torch  # noqa: F401  (imported before the baseline, as any training script has it)

    import torch_threadloader  # noqa: F401

    module_name, _, attr = spec["factory"].partition(":")
    factory = getattr(importlib.import_module(module_name), attr)
    gc.collect()
    before_kib = _status_kib("self", "VmRSS")
    dataset = factory(spec["items"])
    gc.collect()
    dataset_kib = _status_kib("self", "VmRSS")
    dataset_pss_kib = _pss_kib("self")
    hwm_reset = _reset_peak()
    sampler = TreeSampler()
    sampler.start()
    start = time.perf_counter()
    loader = _make_loader(spec, dataset)
    seen = 0
    for batch in loader:
        seen += len(batch)
    del batch
    seconds = time.perf_counter() - start
    close = getattr(loader, "close", None)
    sampler.stop()  # before close(): persistent workers still count
    if callable(close):
        close()
    del loader
    # With no worker process the tree is this process, and its kernel-kept peak is exact;
    # with workers, the sampled peak of the sum is the better (lower-bound) figure.
    own_hwm_kib = _status_kib("self", "VmHWM") if hwm_reset else 0
    peak_rss_kib = max(sampler.peak_rss_kib, own_hwm_kib)
    mib = 1024.0
    return {
        "items": seen,
        "seconds": seconds,
        "dataset_mib": (dataset_kib - before_kib) / mib,
        "process_with_dataset_mib": dataset_kib / mib,
        "peak_tree_rss_mib": peak_rss_kib / mib,
        "peak_tree_pss_mib": sampler.peak_pss_kib / mib,
        "above_dataset_mib": max(sampler.peak_pss_kib - dataset_pss_kib, own_hwm_kib - dataset_kib) / mib,
        "above_dataset_pss_mib": (sampler.peak_pss_kib - dataset_pss_kib) / mib,
        "above_dataset_rss_mib": (peak_rss_kib - dataset_kib) / mib,
        "own_peak_above_dataset_mib": (own_hwm_kib - dataset_kib) / mib if hwm_reset else None,
        "sum_child_peak_rss_mib": sum(sampler.child_hwm_kib.values()) / mib,
        "worker_processes": sampler.peak_children,
        "exact_own_peak": hwm_reset,
    }


def record(recorder: Any, case: str, config: str, report: dict[str, Any], **params: Any) -> None:
    """Record a probe's ``report`` with ``recorder`` (a :class:`benchmarks.result.Recorder`)."""
    for key in MEMORY_METRICS:
        recorder.add(case, config, key.removesuffix("_mib"), [report[key]], "MiB", **params)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    print(json.dumps(probe(json.loads(args[0]))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
