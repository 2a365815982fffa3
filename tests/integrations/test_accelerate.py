"""accelerate: a prepared ThreadLoader stays a ThreadLoader, loads on this process's threads, gets
accelerate's shard, places batches, and resumes exactly through save_state/load_state."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("accelerate")

from accelerate import Accelerator, DataLoaderConfiguration
from accelerate.state import AcceleratorState, PartialState

from tests.fixtures.frameworks import ACC_SAMPLES, WhoLoads, accelerate_run, indices, where
from tests.fixtures.scripts import run_ranks
from torch_threadloader import ThreadLoader
from torch_threadloader.integrations.accelerate import (
    AcceleratedThreadLoader,
    prepare_threadloader,
    skip_first_batches,
)


def check_run(result: dict[str, Any]) -> None:
    assert result["class_kept"], "the prepared loader is still a ThreadLoader"
    assert result["prepare_passes_it_through"], "accelerator.prepare(loader) leaves it as it is"
    assert result["pids"] == [result["pid"]], "every batch was loaded in this process"
    assert result["threads"] == ["threadloader-worker-0", "threadloader-worker-1"], "on the loader's threads"
    assert result["ours"] == result["accelerate"], "the batches of accelerate's own shard, epoch for epoch"
    assert result["resumed"] == result["ours"], "save_state / load_state resume the epoch exactly"
    per_epoch = len(result["ends"]) // 2
    assert result["ends"] == ([False] * (per_epoch - 1) + [True]) * 2, "end_of_dataloader on each last batch"
    assert result["dtypes"] == ["torch.bfloat16"], "bf16 mixed precision on CPU"
    assert result["devices"] == [str(torch.device(result["device"]).type)], "batches on the accelerator's device"


def test_one_process_keeps_the_loader_and_resumes_exactly(tmp_path: Path) -> None:
    result = accelerate_run(str(tmp_path / "checkpoint"))
    assert result["world"] == 1
    check_run(result)
    assert sorted(i for e in result["ours"][:1] for b in e for i in b) == list(range(ACC_SAMPLES))


@pytest.mark.slow
def test_two_gloo_processes_each_load_their_shard_on_their_threads(tmp_path: Path) -> None:
    env = {"CHECKPOINT_DIR": str(tmp_path / "checkpoint")}
    results = run_ranks("tests.fixtures.frameworks", tmp_path, timeout=240, args=["accelerate"], env=env)
    for rank, result in enumerate(results):
        assert (result["rank"], result["world"]) == (rank, 2)
        check_run(result)
    assert results[0]["pid"] != results[1]["pid"]
    first_epoch = [i for r in results for b in r["ours"][0] for i in b]
    assert sorted(first_epoch) == list(range(ACC_SAMPLES)), "the ranks' shards cover the epoch once"


def test_batches_come_from_this_process_threads_and_the_class_is_kept() -> None:
    acc = Accelerator(cpu=True)
    loader = prepare_threadloader(acc, ThreadLoader(WhoLoads(12), batch_size=4, num_workers=2))
    assert type(loader) is AcceleratedThreadLoader and isinstance(loader, ThreadLoader)
    batches = list(loader)
    pids, threads = where(batches)
    assert pids == {os.getpid()}
    assert threads == {"threadloader-worker-0", "threadloader-worker-1"}
    assert indices(batches) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]


def test_device_placement_off_leaves_batches_where_they_are() -> None:
    acc = Accelerator(cpu=True)
    loader = prepare_threadloader(acc, ThreadLoader(WhoLoads(4), batch_size=2), device_placement=False)
    assert loader.device is None
    assert [b["x"].device.type for b in loader] == ["cpu", "cpu"]


def test_an_error_of_the_batch_fetched_ahead_is_raised_in_its_turn_and_the_epoch_goes_on() -> None:
    acc = Accelerator(cpu=True)
    loader = prepare_threadloader(acc, ThreadLoader(WhoLoads(8, fail_at=5), batch_size=2, num_workers=2))
    it = iter(loader)
    got = [indices([next(it)]) for _ in range(2)]
    with pytest.raises(KeyError, match="item 5 is broken"):
        next(it)
    got.append(indices([next(it)]))
    with pytest.raises(StopIteration):
        next(it)
    assert got == [[[0, 1]], [[2, 3]], [[6, 7]]]
    assert not acc.gradient_state.in_dataloader, "the epoch left accelerate's gradient state"


def test_break_closes_the_epoch_and_leaves_the_gradient_state() -> None:
    acc = Accelerator(cpu=True)
    loader = prepare_threadloader(acc, ThreadLoader(WhoLoads(40), batch_size=2, num_workers=2))
    for i, _ in enumerate(loader):
        assert acc.gradient_state.in_dataloader
        if i == 2:
            break
    assert not acc.gradient_state.in_dataloader
    assert skip_first_batches(loader, 3) is loader, "the batch fetched ahead is not in the state"
    assert indices(list(loader))[0] == [6, 7]


def test_state_leaves_out_the_batch_fetched_ahead() -> None:
    acc = Accelerator(cpu=True)
    loader = prepare_threadloader(acc, ThreadLoader(WhoLoads(20), batch_size=2, shuffle=True, num_workers=2))
    it = iter(loader)
    got = [next(it) for _ in range(3)]
    state = loader.state_dict()
    it.close()
    again = prepare_threadloader(acc, ThreadLoader(WhoLoads(20), batch_size=2, shuffle=True, num_workers=2))
    again.load_state_dict(state)
    rest = list(again)
    seen = indices(got) + indices(rest)
    assert len(seen) == 10 and sorted(i for b in seen for i in b) == list(range(20))


def test_skip_first_batches_checks_the_count_against_the_loaded_state() -> None:
    acc = Accelerator(cpu=True)
    loader = prepare_threadloader(acc, ThreadLoader(WhoLoads(20), batch_size=2))
    it = iter(loader)
    for _ in range(4):
        next(it)
    it.close()
    with pytest.raises(ValueError, match=r"num_batches=3.*4 batches"):
        skip_first_batches(loader, 3)
    assert skip_first_batches(loader, 4) is loader
    assert indices(list(loader))[0] == [8, 9], "resumed after the 4 batches, none loaded again"
    with pytest.raises(ValueError, match="num_batches"):
        skip_first_batches(loader, -1)


def test_refusals_name_what_is_wrong() -> None:
    acc = Accelerator(cpu=True)
    with pytest.raises(TypeError, match="ThreadLoader"):
        prepare_threadloader(acc, torch.utils.data.DataLoader(WhoLoads(4)))  # type: ignore[arg-type]
    prepared = prepare_threadloader(acc, ThreadLoader(WhoLoads(4)))
    with pytest.raises(TypeError, match="AcceleratedThreadLoader"):
        prepare_threadloader(acc, prepared)
    AcceleratorState._reset_state(True)
    PartialState._reset_state()
    dispatching = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(dispatch_batches=True))
    with pytest.raises(ValueError, match="dispatch_batches"):
        prepare_threadloader(dispatching, ThreadLoader(WhoLoads(4)))


def test_a_rebuilt_loader_keeps_the_per_worker_options() -> None:
    from torch_threadloader.integrations._rebuild import loader_settings

    loader = ThreadLoader(list(range(8)), batch_size=2, num_workers=2, worker_copy="deep", per_sample_rng=True)
    settings = loader_settings(loader)
    assert settings["worker_copy"] == "deep" and settings["per_sample_rng"] is True
