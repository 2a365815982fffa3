"""The installed command line: ``python -m torch_threadloader info``.

The benchmarks' command line, ``python -m benchmarks.run``, is tested in test_benchmarks_smoke.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.fixtures.scripts import run_cli
from torch_threadloader.tools.cli import main


def test_info_prints_the_capability_report() -> None:
    done = run_cli("info")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    python = ".".join(map(str, sys.version_info[:3]))
    assert f"Python                  {python}" in out
    assert "GIL                     enabled" in out or "GIL                     disabled" in out
    assert f"torch                   {torch.__version__}" in out
    assert "torchvision" in out and "CUDA" in out and "CPUs" in out
    assert "Recommended settings:" in out and "ThreadLoader(num_workers=" in out


def test_info_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["python"] == ".".join(map(str, sys.version_info[:3]))
    assert isinstance(report["gil_enabled"], bool)
    assert report["torch"] == torch.__version__
    assert report["cuda_available"] == torch.cuda.is_available()
    assert report["usable_cpus"] >= 1
    assert {r["case"] for r in report["recommendations"]} >= {"async dataset (async def __getitem__)"}


def test_a_command_is_required() -> None:
    done = run_cli()
    assert done.returncode == 2
    assert "info" in done.stderr


def _intraop_recommendation(**fields: object) -> dict[str, str] | None:
    from torch_threadloader.tools.info import collect, recommendations

    info = {**collect(), **fields}
    recs = [r for r in recommendations(info) if "set_num_threads" in r["setting"]]
    assert len(recs) <= 1
    return recs[0] if recs else None


def test_info_says_the_loader_threads_already_use_one_intraop_thread() -> None:
    rec = _intraop_recommendation(torch_intraop_threads=4, threadloader_worker_intraop_threads=1)
    assert rec is not None
    assert "main process" in rec["case"]
    assert "already run torch ops on 1 intra-op thread" in rec["why"] and "(4)" in rec["why"]


def test_info_without_per_thread_teams_recommends_one_thread_for_the_loader() -> None:
    rec = _intraop_recommendation(
        torch_intraop_threads=4, threadloader_worker_intraop_threads=4, torch_parallel_backend="native thread pool"
    )
    assert rec is not None
    assert "cannot give its worker threads 1 each" in rec["why"]


def test_info_has_nothing_to_say_of_one_intraop_thread() -> None:
    assert _intraop_recommendation(torch_intraop_threads=1, threadloader_worker_intraop_threads=1) is None


def test_info_reports_the_worker_threads_intraop_setting(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["threadloader_worker_intraop_threads"] >= 1
    assert isinstance(report["torch_parallel_backend"], str)
    assert main(["info"]) == 0
    assert "torch intra-op threads" in capsys.readouterr().out


def _allocator_in(env: dict[str, str]) -> str:
    import os

    code = "from torch_threadloader.tools import info; print(info.collect()['allocator'])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **env})
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc and /proc/self/maps are Linux's")
def test_info_names_the_allocator_and_its_tunables() -> None:
    import platform

    if platform.libc_ver()[0] != "glibc":
        pytest.skip("not a glibc system")
    assert "default settings" in _allocator_in({"GLIBC_TUNABLES": ""})
    tuned = _allocator_in({"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=268435456"})
    assert tuned.startswith("glibc ") and "glibc.malloc.trim_threshold=268435456" in tuned
    tcmalloc = Path("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4")
    if tcmalloc.exists():  # Debian's libtcmalloc-minimal4, where installed
        assert _allocator_in({"LD_PRELOAD": str(tcmalloc)}) == "tcmalloc"


def test_info_recommends_an_allocator_setting_only_for_glibc_defaults() -> None:
    from torch_threadloader.tools import info

    base = {"usable_cpus": 2, "gil_enabled": True, "torch_intraop_threads": 1, "cuda_available": False}

    def cases(allocator: str) -> list[str]:
        return [
            r["setting"] for r in info.recommendations({**base, "allocator": allocator}) if "page faults" in r["case"]
        ]

    assert cases("glibc 2.36 malloc (default settings)") == [
        f"start Python with LD_PRELOAD=libtcmalloc_minimal.so.4, or GLIBC_TUNABLES={info.GLIBC_KEEP_FREED}"
    ]
    assert cases("glibc 2.36 malloc (glibc.malloc.trim_threshold=1)") == []
    assert cases("tcmalloc") == []


@pytest.mark.parametrize("gil", [True, False])
def test_info_gives_the_guides_advice_for_pure_python_items(gil: bool) -> None:
    """The guide's table: worker processes on a GIL build, threads with objects of their own
    (worker_copy="pickle") on a free-threaded one."""
    from torch_threadloader.tools.info import collect, recommendations

    info = {**collect(), "gil_enabled": gil, "free_threaded_build": not gil}
    (rec,) = [r for r in recommendations(info) if r["case"].startswith("pure-Python")]
    if gil:
        assert "worker_processes=" in rec["setting"] and "DataLoader(" not in rec["setting"]
    else:
        assert 'worker_copy="pickle"' in rec["setting"]
