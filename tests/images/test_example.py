"""examples/imagenet_style.py runs offline, trains, and its seeded batches match across num_workers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "imagenet_style.py"


def test_imagenet_style_example_runs():
    pytest.importorskip("lightning.pytorch")
    args = ["--classes", "3", "--per-class", "8", "--epochs", "2", "--workers", "2", "--batch-size", "8"]
    done = subprocess.run([sys.executable, str(EXAMPLE), *args], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    assert "trained 6 steps over 2 epochs of 24 images" in done.stdout
    assert "0 outside the pool" in done.stdout
    assert "bit-identical batches: True" in done.stdout
