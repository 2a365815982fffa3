"""Every benchmark workload runs end to end at a tiny size, and its outputs have their shape.

This keeps the harness working; it says nothing about speed: no test here asserts a time.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks.harness import SCALES
from benchmarks.report import format_markdown, write_outputs
from benchmarks.suite import run_suite
from benchmarks.workloads import NAMES, load

pytestmark = pytest.mark.slow

SMOKE = SCALES["smoke"]
ROOT = Path(__file__).resolve().parent.parent


def _check_case(case: dict[str, Any]) -> None:
    runners = {c["runner"] for c in case["configs"]}
    assert {"threadloader", "torch"} <= runners, f"{case['name']} is not side by side: {runners}"
    assert case["items"] > 0 and case["batch_size"] > 0
    for config in case["configs"]:
        if case["mode"] == "memory":
            memory = config["memory"]
            assert memory["items"] == case["items"]
            for key in ("dataset_mib", "above_dataset_mib", "peak_tree_pss_mib", "peak_tree_rss_mib"):
                assert math.isfinite(memory[key]), (config["label"], key)
            assert memory["worker_processes"] >= 0
            continue
        assert len(config["seconds"]) == SMOKE.epochs
        assert all(s > 0 for s in config["seconds"])
        if case["mode"] == "epoch":
            assert config["items_per_s"] > 0
            assert len(config["minor_faults"]) == SMOKE.epochs and all(f >= 0 for f in config["minor_faults"])
            assert config["minor_faults_per_item"] >= 0
        else:
            assert len(config["second_epoch"]) == len(config["seconds"])
        if config["runner"] == "torch" or config["runner"] == "threadloader":
            assert config["vs_torch_best"] > 0


@pytest.mark.parametrize("name", NAMES)
def test_workload_runs_and_reports(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Child processes (the memory probe, the HTTP server) start here, outside the checkout.
    monkeypatch.chdir(tmp_path)
    results = run_suite([name], SMOKE, command=f"pytest smoke {name}", workdir=tmp_path)

    assert results["scale"]["name"] == "smoke"
    assert results["machine"]["usable_cpus"] >= 1
    [workload] = results["workloads"]
    assert workload["name"] == name
    assert workload["cases"], "a workload without cases"
    for case in workload["cases"]:
        _check_case(case)
    assert len(workload["targets"]) == len(load(name).targets) >= 1
    for target in workload["targets"]:
        assert math.isfinite(target["measured"]), target
        assert isinstance(target["met"], bool)
    if name == "remote_http":
        [case] = workload["cases"]
        assert case["extra"]["requests_served"] == case["extra"]["requests_expected"] > 0

    out = tmp_path / "out"
    paths = write_outputs(results, out)
    assert json.loads(paths["json"].read_text())["workloads"][0]["name"] == name
    markdown = paths["markdown"].read_text()
    assert markdown == format_markdown(results)
    assert f"### {name}" in markdown and "| configuration |" in markdown and "## Targets" in markdown
    assert paths["chart"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The generated data (files, JPEGs) lived in a temporary folder that is gone now, and
    # nothing was written to the working directory.
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_unknown_workload_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown workload 'nope'"):
        run_suite(["nope"], SMOKE, command="")


def test_epoch_kernel_time_reports_every_configuration(capsys: pytest.CaptureFixture[str]) -> None:
    import benchmarks.harness as harness
    from benchmarks.epoch_kernel_time import main

    make_loader, time_epoch = harness.make_loader, harness.time_epoch
    assert main(["--workload", "local_files", "--scale", "smoke"]) == 0
    assert (harness.make_loader, harness.time_epoch) == (make_loader, time_epoch)  # put back
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| 128 KB files: ")]
    labels = {row.split("|")[1].strip().removeprefix("128 KB files: ") for row in rows}
    assert labels == {
        "ThreadLoader nw=0",
        "ThreadLoader nw=2",
        "ThreadLoader nw=2 buffers",
        "torch nw=0",
        "torch nw=2",
        "torch nw=2 persistent",
        "no loader, 1 thread",
        "no loader, 2 threads",
    }


class _Squares:
    def __init__(self, size: int, fail_at: int | None = None) -> None:
        self.size, self.fail_at = size, fail_at

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> int:
        if index == self.fail_at:
            raise ValueError(f"item {index}")
        return index * index


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_plain_loop_yields_every_batch_once(threads: int) -> None:
    from benchmarks.harness import PlainLoop

    batches = list(PlainLoop(_Squares(23), 4, None, 1, threads))
    assert len(batches) == 6
    assert sorted(int(x) for b in batches for x in b) == [i * i for i in range(23)]
    if threads == 1:
        assert batches[0].tolist() == [0, 1, 4, 9]  # index order


def test_plain_loop_threads_raise_the_items_error_and_stop_on_break() -> None:
    from benchmarks.harness import PlainLoop

    with pytest.raises(ValueError, match="item 9"):
        list(PlainLoop(_Squares(40, fail_at=9), 4, None, 1, 2))
    for _ in PlainLoop(_Squares(400), 4, None, 1, 2):
        break  # the threads stop and are joined (the autouse fixture checks none is left)


def test_machine_state_probes_return_ratios() -> None:
    from benchmarks.suite import effective_cpus, memory_scaling

    for value in (effective_cpus(2, seconds=0.02), memory_scaling(2, seconds=0.02, mib=4)):
        assert math.isfinite(value) and 0 < value < 8  # a ratio of rates, not a time


def _run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.run", *args], capture_output=True, text=True, timeout=300, cwd=cwd
    )


def test_run_quick_overhead_writes_outputs_and_prints_the_table(tmp_path: Path) -> None:
    done = _run("--quick", "--workload", "overhead", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "| ThreadLoader nw=0 |" in done.stdout and "| torch nw=2 persistent |" in done.stdout
    assert "## Targets" in done.stdout
    assert {p.name for p in tmp_path.iterdir()} == {"results.json", "results.md", "chart.png"}
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["scale"]["name"] == "quick"
    assert [w["name"] for w in results["workloads"]] == ["overhead"]
    assert results["command"] == f"python -m benchmarks.run --quick --workload overhead --out {tmp_path}"


def test_run_refuses_an_unknown_workload(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.run import main

    assert main(["--workload", "overhead,nope"]) == 2
    assert "unknown workload nope" in capsys.readouterr().err


def test_run_list(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.run import main

    assert main(["--list"]) == 0
    out = capsys.readouterr().out
    for name in ("overhead", "local_files", "remote_http", "jpeg_pipeline", "memory"):
        assert name in out


def test_run_writes_the_published_results_by_default() -> None:
    from benchmarks.run import RESULTS, build_parser

    assert build_parser().parse_args([]).out == RESULTS == ROOT / "benchmarks" / "results"


def test_step_wait_reports_every_loader_beside_the_queue(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import step_wait

    assert step_wait.main(["--steps", "5", "--repeats", "1", "--workers", "2", "--step-ms", "1"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| 2 |")]
    # every loader, for both kinds of step, each with its ratio to the queue of the same round
    assert len(rows) == 2 * len(step_wait.loaders(2, 1))
    assert sum("queue.Queue (ceiling)" in row and "| 1.00 (1.00-1.00) |" in row for row in rows) == 2
    assert all(row.rstrip().endswith(("met |", "missed |", "|  |")) for row in rows)


def test_per_batch_measures_both_paths_on_this_interpreter() -> None:
    from benchmarks.per_batch import measure

    for lists in (True, False):
        ours, plain, shares = measure(4, 64, lists, rounds=2)
        assert ours > 0 and plain > 0
        assert len(shares) == 2 and all(s > 0 for s in shares)


def test_hardening_cost_runs_all_three_clients_on_a_real_server() -> None:
    from benchmarks.hardening_cost import BODY, per_call_costs, run_round
    from benchmarks.workloads.remote_http import LocalServer

    server = LocalServer(max_requests=3 * 32, delay=0.0, size=BODY)
    try:
        cpu = run_round(f"http://127.0.0.1:{server.port}", 32, 8)
    finally:
        served = server.stop()
    assert served == 3 * 32, "each client made exactly one GET per item"
    assert set(cpu) == {"bare aiohttp", "unhardened", "HttpDataset"} and all(v > 0 for v in cpu.values())
    assert len(per_call_costs(items=200)) == 3
