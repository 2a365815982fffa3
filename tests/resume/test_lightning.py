"""Lightning mid-epoch checkpoints resume a ThreadLoader exactly: a real Trainer stopped after
``k`` steps (``ModelCheckpoint(every_n_train_steps=k)``), then ``fit(ckpt_path=...)``; the
steps trained before and after are those of the uninterrupted run, batch for batch.
DDP runs two real processes (gloo, CPU, ``strategy="ddp"``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("lightning.pytorch")

from tests import lightning_resume

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("sized", "k"), [(True, 3), (True, 14), (False, 5)])
def test_trainer_resumes_mid_epoch_exactly(tmp_path: Path, sized: bool, k: int) -> None:
    full = lightning_resume.run("full", tmp_path / "full", 1, sized, k)
    part = lightning_resume.run("part", tmp_path / "run", 1, sized, k)
    resumed = lightning_resume.run("resume", tmp_path / "run", 1, sized, k)
    assert len(part["seen"]) == k
    assert part["seen"] + resumed["seen"] == full["seen"]
    assert not resumed["warnings"], resumed["warnings"]


def ddp(phase: str, out: Path, k: int, procs: int = 0) -> list[dict[str, object]]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), PL_DISABLE_FORK="1")
    done = subprocess.run(
        [sys.executable, "-m", "tests.lightning_resume", phase, str(out), "2", "1", str(k), str(procs)],
        cwd=ROOT,
        env=env,
        timeout=240,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads((out / f"{phase}-rank{r}.json").read_text()) for r in (0, 1)]


@pytest.mark.slow  # two Trainer runs of two gloo ranks each (the other DDP resumes run in every tier)
@pytest.mark.parametrize("sized", [True, False])
def test_a_trainer_over_worker_processes_trains_and_resumes_as_over_threads(tmp_path: Path, sized: bool) -> None:
    k = 4
    full = lightning_resume.run("full", tmp_path / "full", 1, sized, k)  # two worker threads
    part = lightning_resume.run("part", tmp_path / "run", 1, sized, k, procs=2)  # two processes
    resumed = lightning_resume.run("resume", tmp_path / "run", 1, sized, k, procs=2)
    assert len(part["seen"]) == k
    assert part["seen"] + resumed["seen"] == full["seen"]
    assert not resumed["warnings"], resumed["warnings"]


@pytest.mark.slow  # a minute of Lightning DDP training, twice (the other DDP resumes run in every tier)
@pytest.mark.parametrize("procs", [0, 1], ids=["threads", "processes"])
def test_ddp_ranks_each_resume_their_own_batches(tmp_path: Path, procs: int) -> None:
    k = 3  # of 5 steps per epoch per rank
    full = ddp("full", tmp_path / "full", k)
    part = ddp("part", tmp_path / "run", k, procs)
    resumed = ddp("resume", tmp_path / "run", k, procs)
    for rank in (0, 1):
        assert part[rank]["seen"] + resumed[rank]["seen"] == full[rank]["seen"], f"rank {rank}"  # type: ignore[operator]
        assert not resumed[rank]["warnings"]
    ids = [i for r in (0, 1) for step in full[r]["seen"][:5] for i in step]  # type: ignore[index]
    assert sorted(ids) == list(range(lightning_resume.N)), "the two ranks share the epoch"


def samples(steps: object) -> list[int]:
    return [i for step in steps for i in step]  # type: ignore[attr-defined]


@pytest.mark.slow  # multi-rank Lightning training
def test_ddp_two_ranks_resumed_on_one_cover_the_epoch_once(tmp_path: Path) -> None:
    k = 2  # of 5 steps per rank
    part = ddp("part", tmp_path, k)
    resumed = lightning_resume.run("resume", tmp_path, 1, True, k)
    left = 10 - k  # one rank's loader has 10 batches; Lightning counts k of them done
    rest = samples(resumed["seen"][:left])
    assert sorted(samples(part[0]["seen"]) + samples(part[1]["seen"]) + rest) == list(range(lightning_resume.N))
    assert len(resumed["seen"]) == left + 10, "then a whole second epoch"


@pytest.mark.slow  # multi-rank Lightning training
def test_one_rank_resumed_on_two_ddp_ranks_covers_the_epoch_once(tmp_path: Path) -> None:
    k = 2  # of 10 steps
    part = lightning_resume.run("part", tmp_path, 1, True, k)
    resumed = ddp("resume", tmp_path, k)
    left = 5 - k  # each rank's loader has 5 batches
    rest = samples(resumed[0]["seen"][:left]) + samples(resumed[1]["seen"][:left])
    assert sorted(samples(part["seen"]) + rest) == list(range(lightning_resume.N))
    assert len(resumed[0]["seen"]) == len(resumed[1]["seen"]) == left + 5


def test_lightnings_worker_seeding_does_not_reseed_the_training_process() -> None:
    import functools

    import torch
    from lightning.fabric.utilities.seed import pl_worker_init_function

    from torch_threadloader import ThreadLoader

    torch.manual_seed(5)
    loader = ThreadLoader(
        list(range(8)), batch_size=2, num_workers=2, worker_init_fn=functools.partial(pl_worker_init_function, rank=0)
    )
    assert len(list(loader)) == 4
    assert torch.initial_seed() == 5, "a worker thread reseeded the process's global generator"
