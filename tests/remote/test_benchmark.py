"""benchmarks/remote_throughput.py runs end to end at a tiny size and prints its tables."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_remote_throughput_runs_at_a_tiny_size():
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.remote_throughput", "--quick", "--repeats", "1", "--latency", "0.01"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for expected in (
        "HttpDataset + ThreadLoader",
        "torch DataLoader, 16 worker processes",
        "S3Dataset + ThreadLoader",
        "s3fs",
    ):
        assert expected in done.stdout, expected
