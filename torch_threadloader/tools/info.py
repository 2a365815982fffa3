"""What this machine and interpreter offer a data loader, and the settings that follow from it.

``python -m torch_threadloader info`` prints :func:`format_report` of :func:`collect`; the
benchmark harness stores :func:`collect` with its results, so a number always comes with the
machine it was measured on.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import platform
import sys
import sysconfig
from pathlib import Path
from typing import Any

__all__ = ["collect", "format_report", "gil_enabled", "recommendations", "usable_cpus"]


def gil_enabled() -> bool:
    """Whether the GIL is enabled now (always on builds before 3.13 and on default builds;
    a free-threaded build may still enable it, e.g. for an extension that needs it)."""
    check = getattr(sys, "_is_gil_enabled", None)
    return bool(check()) if check is not None else True


def _cgroup_cpu_limit() -> float | None:
    """CPUs allowed by the cgroup v2 quota (``cpu.max``), or None when unlimited/unknown."""
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        return None
    if quota == "max":
        return None
    return int(quota) / int(period)


def usable_cpus() -> int:
    """CPUs this process may run on: its affinity mask, capped by a cgroup CPU quota."""
    process_cpu_count = getattr(os, "process_cpu_count", None)
    if process_cpu_count is not None:
        count = process_cpu_count() or 1
    elif hasattr(os, "sched_getaffinity"):
        count = len(os.sched_getaffinity(0))
    else:
        count = os.cpu_count() or 1
    limit = _cgroup_cpu_limit()
    if limit is not None:
        count = min(count, max(1, math.ceil(limit)))
    return count


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024**2
    except OSError:
        pass
    return None


def _version(module: str) -> str | None:
    try:
        return str(__import__(module).__version__)
    except Exception:
        return None


def _parallel_info(torch: Any) -> str:
    try:
        return str(torch.__config__.parallel_info())
    except Exception:
        return ""


def _parallel_backend(text: str) -> str:
    """torch's intra-op backend as ``parallel_info()`` names it ("OpenMP", "native thread
    pool", ...), or "unknown"."""
    for line in text.splitlines():
        if line.startswith("ATen parallel backend:"):
            return line.split(":", 1)[1].strip() or "unknown"
    return "unknown"


#: glibc settings that keep freed memory for the next batch (docs/guide.md, "Big batches").
GLIBC_KEEP_FREED = (
    "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=268435456:glibc.malloc.top_pad=268435456"
)
_ALLOCATORS = ("tcmalloc", "jemalloc", "mimalloc")


def _allocator() -> str:
    """The C allocator of this process: a preloaded or linked tcmalloc, jemalloc or mimalloc
    (seen in ``/proc/self/maps``), else the C library's malloc, with its tunables if set."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        maps = ""
    for name in _ALLOCATORS:
        if f"lib{name}" in maps:
            return name
    libc, version = platform.libc_ver()
    if libc != "glibc":
        return libc or "unknown"
    malloc_tunables = [t for t in os.environ.get("GLIBC_TUNABLES", "").split(":") if t.startswith("glibc.malloc.")]
    settings = ":".join(malloc_tunables) if malloc_tunables else "default settings"
    return f"glibc {version} malloc ({settings})"


def collect() -> dict[str, Any]:
    """The capability report as a JSON-ready dict."""
    import torch

    cuda = torch.cuda.is_available()
    devices = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if cuda else []
    accelerator = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
    from torch_threadloader import __version__

    parallel = _parallel_info(torch)
    info: dict[str, Any] = {
        "torch_threadloader": __version__,
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "free_threaded_build": bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
        "gil_enabled": gil_enabled(),
        "platform": platform.platform(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "usable_cpus": usable_cpus(),
        "cgroup_cpu_limit": _cgroup_cpu_limit(),
        "memory_gib": _memory_gib(),
        "torch": torch.__version__,
        "torchvision": _version("torchvision"),
        "numpy": _version("numpy"),
        "torch_intraop_threads": torch.get_num_threads(),
        "torch_parallel_backend": _parallel_backend(parallel),
        # torch_threadloader.intraop's rule: with OpenMP each thread has its own team size and
        # the loader sets its worker threads' to 1; otherwise they share torch's one pool.
        "threadloader_worker_intraop_threads": 1 if "OpenMP" in parallel else torch.get_num_threads(),
        "multiprocessing_start_method": multiprocessing.get_start_method(allow_none=True)
        or multiprocessing.get_context().get_start_method(),
        "cuda_available": cuda,
        "cuda_version": torch.version.cuda,
        "cuda_devices": devices,
        "accelerator": str(accelerator) if accelerator is not None else None,
        "allocator": _allocator(),
    }
    info["recommendations"] = recommendations(info)
    return info


def recommendations(info: dict[str, Any]) -> list[dict[str, str]]:
    """Settings for ThreadLoader on this machine, by kind of dataset (see docs/performance.md)."""
    cpus = int(info["usable_cpus"])
    threads_run_python = not info["gil_enabled"]
    recs = [
        {
            "case": "CPU work in NumPy, torch, Pillow or torchvision (releases the GIL)",
            "setting": f"ThreadLoader(num_workers={cpus})",
            "why": f"one thread per usable CPU ({cpus}); the heavy calls run outside the GIL",
        },
        {
            "case": "blocking I/O (local or network files, HTTP with a blocking client)",
            "setting": f"ThreadLoader(num_workers={cpus}, item_concurrency=16)",
            "why": "a thread waiting on I/O costs no CPU: keep many requests in flight",
        },
        {
            "case": "async dataset (async def __getitem__)",
            "setting": "ThreadLoader(num_workers=4, item_concurrency=32)",
            "why": "128 coroutines in flight on the loader's one event-loop thread",
        },
    ]
    if threads_run_python:
        recs.append(
            {
                "case": "pure-Python CPU work (tokenising, parsing)",
                "setting": f'ThreadLoader(num_workers={cpus}, worker_copy="pickle")',
                "why": "the GIL is disabled: threads run Python in parallel, each over objects of its own "
                "(threads reading shared objects contend on their reference counts)",
            }
        )
    else:
        recs.append(
            {
                "case": "pure-Python CPU work (tokenising, parsing)",
                "setting": f"ThreadLoader(num_workers=1, worker_processes={cpus}), a few threads per process "
                "where the items also wait on I/O",
                "why": "the GIL is enabled: only worker processes run Python on more than one core",
            }
        )
    threads = int(info["torch_intraop_threads"])
    if threads > 1:
        if info.get("threadloader_worker_intraop_threads") == 1:
            recs.append(
                {
                    "case": "torch ops in the main process (the training step, your own code)",
                    "setting": "torch.set_num_threads(1) when the training step runs on a GPU; "
                    "keep the default for CPU training",
                    "why": "ThreadLoader's worker threads already run torch ops on 1 intra-op thread "
                    "each, as torch's worker processes do; the main process keeps its own setting "
                    f"({threads}), whose OpenMP threads compete with the workers for the cores; "
                    "see docs/performance.md",
                }
            )
        else:
            recs.append(
                {
                    "case": "torch ops in the dataset or collate (torch.stack of big batches, v2 transforms)",
                    "setting": "torch.set_num_threads(1) when the training step runs on a GPU",
                    "why": f"this torch's intra-op pool ({info['torch_parallel_backend']}) is shared by "
                    "all threads, so ThreadLoader cannot give its worker threads 1 each: they share "
                    f"{threads} with the main process and oversubscribe the cores; see docs/performance.md",
                }
            )
    allocator = str(info.get("allocator", ""))
    if allocator.startswith("glibc") and "default settings" in allocator:
        recs.append(
            {
                "case": "items of hundreds of KiB (decoded images, float32 crops), if an epoch takes "
                "tens of minor page faults per item",
                "setting": f"start Python with LD_PRELOAD=libtcmalloc_minimal.so.4, or GLIBC_TUNABLES={GLIBC_KEEP_FREED}",
                "why": "glibc may give each freed batch back to the kernel and fault it in again for the "
                "next; see docs/guide.md, 'Big batches'",
            }
        )
    recs.append(
        {
            "case": "training on CUDA",
            "setting": "pin_memory=True" if info["cuda_available"] else "pin_memory=False",
            "why": "pinned batches copy to the GPU asynchronously"
            if info["cuda_available"]
            else "no CUDA device: pinning would only warn",
        }
    )
    return recs


def _intraop_row(info: dict[str, Any]) -> str:
    row = f"{info['torch_intraop_threads']} in this thread"
    backend = info.get("torch_parallel_backend")
    if backend is None:  # a report from before the field existed
        return str(info["torch_intraop_threads"])
    if info.get("threadloader_worker_intraop_threads") == 1:
        return f"{row}; 1 in each ThreadLoader worker thread (backend {backend})"
    return f"{row}; ThreadLoader's worker threads share them (backend {backend})"


def format_report(info: dict[str, Any]) -> str:
    """The report as aligned text."""
    gil = "enabled" if info["gil_enabled"] else "disabled"
    build = "free-threaded build" if info["free_threaded_build"] else "default (GIL) build"
    cuda = (
        f"available, CUDA {info['cuda_version']}, {len(info['cuda_devices'])} device(s): "
        + ", ".join(info["cuda_devices"])
        if info["cuda_available"]
        else "not available" + (f" (torch built for CUDA {info['cuda_version']})" if info["cuda_version"] else "")
    )
    cpus = f"{info['usable_cpus']} usable of {info['cpu_count']}"
    if info["cgroup_cpu_limit"] is not None:
        cpus += f" (cgroup limit {info['cgroup_cpu_limit']:g})"
    memory = f"{info['memory_gib']:.1f} GiB" if info["memory_gib"] is not None else "unknown"
    rows = [
        ("torch-threadloader", info["torch_threadloader"]),
        ("Python", f"{info['python']} ({info['python_implementation']}, {build})"),
        ("GIL", gil),
        ("torch", info["torch"]),
        ("torchvision", info["torchvision"] or "not installed"),
        ("CUDA", cuda),
        ("accelerator", info["accelerator"] or "none"),
        ("CPUs", f"{cpus}; {info['cpu_model']}"),
        ("memory", memory),
        ("torch intra-op threads", _intraop_row(info)),
        ("allocator", info.get("allocator", "unknown")),
        ("platform", info["platform"]),
    ]
    width = max(len(k) for k, _ in rows)
    lines = [f"{k:<{width}}  {v}" for k, v in rows]
    lines += ["", "Recommended settings:"]
    for rec in info["recommendations"]:
        lines.append(f"  {rec['case']}:")
        lines.append(f"      {rec['setting']}")
        lines.append(f"      ({rec['why']})")
    return "\n".join(lines)
