"""Every example runs, offline, as a user would run it."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.scripts import script_env

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

#: What an example needs beyond the package's own dependencies. moto (it needs cryptography),
#: accelerate and transformers have no free-threaded (3.13t) wheels: there the example skips.
NEEDS = {
    "s3_training.py": "moto",
    "frameworks_accelerate.py": "accelerate",
    "frameworks_trainer.py": "transformers",
    "batch_by_cost.py": "tokenizers",
}


@pytest.mark.parametrize(
    "script,args,expect",
    [
        ("demo.py", ["--images", "64", "--workers", "2", "--batch-size", "16"], "ratio ThreadLoader / DataLoader"),
        ("async_http.py", ["--items", "64", "--in-flight", "16"], "64 items of 16 KiB"),
        ("datapipes_pipeline.py", [], "10 batches left"),
        ("resume.py", ["--steps", "3", "--workers", "4"], "uninterrupted epoch's: exact"),
        ("report.py", [], "collate-bound"),
        ("skip_bad_samples.py", [], "10 samples skipped and recorded"),
        ("byte_budget.py", [], "workers waited for room"),
        ("s3_training.py", ["--objects", "128", "--steps", "8"], "trained 8 steps from S3"),
        ("processes.py", ["--items", "128"], "resumed after 3 batches: exact"),
        ("stragglers.py", ["--samples", "200"], "resumed after 3 batches: exact"),
        ("batch_by_cost.py", ["--texts", "600"], "resumed after 3 batches: exact"),
        ("stall_report.py", [], "stall reports; nothing was stopped"),
        ("random_transforms.py", ["--images", "32"], "identical to DataLoader's (images and labels): 4 of 4"),
        ("frameworks_accelerate.py", [], "resumed after 3 batches: exact"),
        pytest.param("frameworks_trainer.py", [], "resumed from checkpoint-3: exact", marks=pytest.mark.slow),
    ],
)
def test_example_runs(script: str, args: list[str], expect: str) -> None:
    needed = NEEDS.get(script)
    if needed is not None and importlib.util.find_spec(needed) is None:
        pytest.skip(f"{script} needs {needed}, which is not installed here (no free-threaded wheel)")
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args], capture_output=True, text=True, timeout=120, env=script_env()
    )
    assert done.returncode == 0, done.stderr
    assert expect in done.stdout


@pytest.mark.slow
def test_ray_example_runs():
    """examples/frameworks_ray.py: a local Ray cluster and a TorchTrainer with 2 CPU workers take
    longer than the other examples' 120 s on a loaded 2-core machine, so it has its own limit."""
    if importlib.util.find_spec("ray") is None:
        pytest.skip("frameworks_ray.py needs ray, which is not installed here (no free-threaded wheel)")
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "frameworks_ray.py")], capture_output=True, text=True, timeout=400
    )
    assert done.returncode == 0, done.stderr
    workers = [line for line in done.stdout.splitlines() if line.startswith("worker ")]
    assert len(workers) == 2 and all("ThreadLoader" in w and "in its own process" in w for w in workers), done.stdout
    assert "64 rows, each once: True" in done.stdout
    assert "Ray Data epoch resumed after 3 batches: exact" in done.stdout
