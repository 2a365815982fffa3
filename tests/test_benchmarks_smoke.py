"""Every benchmark suite runs end to end at a tiny size (``python -m benchmarks SUITE --smoke``)
and writes its results, and every workload of the harness has outputs of their shape.

This keeps the benchmarks working; it says nothing about speed: no test here asserts a time.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks.harness import SCALES
from benchmarks.report import format_markdown, write_outputs
from benchmarks.result import Recorder, Result, format_table, load_results
from benchmarks.suite import run_suite
from benchmarks.suites import SUITES
from benchmarks.workloads import NAMES, load

SMOKE = SCALES["smoke"]
ROOT = Path(__file__).resolve().parent.parent

#: Suites whose smoke run takes a few seconds (the tier run before every commit), with the arguments it needs.
FAST: dict[str, list[str]] = {
    "per_batch": [],
    "number_batches": [],
    "epoch_start": [],
    "stragglers": [],
    "batch_by_cost": [],
    "handoff": [],
    "handoff_rs": [],
    "option_cost": ["--option", "stats,per_sample_rng,worker_copy,stall_report_after"],
    "skip_cost": [],
    "resume_cost": [],
    "profile_case": ["overhead", "bs=1", "ThreadLoader nw=0"],
    "profile_summary": [],
}
#: Suites whose smoke run takes longer than about 6 s on 2 loaded cores (fresh processes, a Ray
#: cluster, a server in another process, images), and the aliases of suites the fast tier runs.
SLOW: dict[str, list[str]] = {
    "run": ["--workload", "overhead"],
    "overhead_floor": [],
    "stats_cost": [],
    "worker_state": [],
    "random_state_cost": [],
    "byte_budget": [],
    "remote_throughput": [],
    "freethreaded": ["--workload", "image_augment"],
    "intraop_threads": [],
    "allocator": [],
    "processes": [],
    "ray_data_last_mile": [],
    "hardening_cost": [],
    "images_ceiling": [],
    "images_draws": [],
    "images_buffers": [],
    "step_wait": [],
    "epoch_kernel_time": [],
}
#: The module a suite needs beyond the ``bench`` extra.
NEEDS = {"handoff_rs": "dataloader_rs", "ray_data_last_mile": "ray"}
RESULT_FIELDS = {
    "suite",
    "case",
    "config",
    "metric",
    "unit",
    "values",
    "median",
    "spread",
    "params",
    "python",
    "torch",
    "commit",
    "timestamp",
}


def test_every_suite_has_a_smoke_run() -> None:
    assert set(FAST) | set(SLOW) == set(SUITES)
    assert not set(FAST) & set(SLOW)


def _smoke(suite: str, out: Path, *args: str, module: str = "benchmarks") -> subprocess.CompletedProcess[str]:
    # Run outside the checkout, so that a suite that writes anywhere but --out is caught.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", module, *([suite] if module == "benchmarks" else []), "--smoke"]
    return subprocess.run(
        [*command, "--out", str(out), *args], capture_output=True, text=True, timeout=600, cwd=out.parent, env=env
    )


def _check_results(suite: str, out: Path) -> list[Result]:
    [path] = [p for p in out.iterdir() if p.name.startswith(f"{suite}-") and p.suffix == ".json"]
    document = json.loads(path.read_text())
    assert document["schema"] == 1 and document["suite"] == suite
    assert document["command"].startswith(f"python -m benchmarks {suite}")
    assert document["results"], f"{suite} recorded nothing"
    for raw in document["results"]:
        assert set(raw) == RESULT_FIELDS, raw
    results = load_results(path)
    for r in results:
        assert r.suite == suite and r.case and r.config and r.metric
        assert r.values and all(isinstance(v, float) for v in r.values), r
        low, high = r.spread
        assert low == min(r.values) and high == max(r.values) and low <= r.median <= high, r
        assert all(math.isfinite(v) for v in r.values), r
        assert r.python.startswith(sys.version.split()[0]) and r.torch
        assert datetime.datetime.fromisoformat(r.timestamp).tzinfo is not None
    assert path.name == f"{suite}-{datetime.datetime.fromisoformat(results[0].timestamp):%Y%m%dT%H%M%SZ}.json"
    return results


@pytest.mark.parametrize(
    ("suite", "args"),
    [*FAST.items(), *(pytest.param(s, a, marks=pytest.mark.slow) for s, a in SLOW.items())],
)
def test_suite_smoke_run_writes_its_results(suite: str, args: list[str], tmp_path: Path) -> None:
    if suite in NEEDS and importlib.util.find_spec(NEEDS[suite]) is None:
        pytest.skip(f"{suite} needs {NEEDS[suite]}")
    out = tmp_path / "out"
    done = _smoke(suite, out, *args)
    assert done.returncode == 0, done.stderr[-4000:]
    results = _check_results(suite, out)
    # every suite prints the table of its results; the harness prints the published run's markdown
    table = "| configuration |" if suite == "run" else "| case | configuration | metric |"
    assert table in done.stdout and f"Wrote {out}" in done.stdout
    assert [p.name for p in tmp_path.iterdir()] == ["out"], "a suite wrote outside --out"
    if suite == "run":
        assert {p.name for p in out.iterdir()} >= {"results.json", "results.md", "chart.png"}
        assert any(r.metric == "epoch" and r.config == "ThreadLoader nw=0" for r in results)
    if suite == "remote_throughput":
        configs = {r.config for r in results}
        assert {"HttpDataset + ThreadLoader", "S3Dataset + ThreadLoader"} <= configs
        assert any(c.startswith("torch DataLoader, 16 worker processes") for c in configs)
        assert any(c.startswith("bare aiohttp GETs, signed by botocore") for c in configs)
        for config in ("HttpDataset + ThreadLoader", "bare asyncio.gather", "S3Dataset + ThreadLoader"):
            metrics = {r.metric for r in results if r.config == config}
            assert {"GET/s", "CPU per GET", "in flight, mean", "in flight, p10"} <= metrics, config


def test_a_suite_runs_as_its_own_module_too(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = _smoke("skip_cost", out, module="benchmarks.skip_cost")
    assert done.returncode == 0, done.stderr[-4000:]
    _check_results("skip_cost", out)


def test_list_names_every_suite_with_a_line(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.__main__ import main

    assert main(["--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == list(SUITES)
    assert all(len(line.split(None, 1)) == 2 for line in lines)


def test_an_unknown_suite_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.__main__ import main

    assert main(["nope"]) == 2
    assert "unknown suite 'nope'" in capsys.readouterr().err


def test_every_suite_module_has_a_main_that_takes_its_name() -> None:
    import importlib
    import inspect

    for name, suite in SUITES.items():
        module = importlib.import_module(f"benchmarks.{suite.module}")
        assert "suite" in inspect.signature(module.main).parameters, name


def test_results_round_trip_and_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.__main__ import main

    recorder = Recorder("demo", ["--x", "1"])
    result = recorder.add("case a", "config b", "epoch", [3, 1, 2], "s", items=4, options={"x": object()})
    assert (result.median, result.spread) == (2.0, (1.0, 3.0))
    assert result.params["items"] == 4 and isinstance(result.params["options"]["x"], str)
    path = recorder.write(tmp_path)
    assert load_results(path) == [result]
    assert json.loads(path.read_text())["command"] == "python -m benchmarks demo --x 1"
    assert set(dataclasses.asdict(result)) == RESULT_FIELDS
    assert main(["report", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.strip() == format_table([result]).strip()
    assert "| case a | config b | epoch | 2.00 | 1.00 – 3.00 | s | 3 |" in out
    with pytest.raises(ValueError, match="no values"):
        recorder.add("case a", "config b", "epoch", [], "s")


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


@pytest.mark.slow
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


def test_epoch_kernel_time_reports_every_configuration(tmp_path: Path) -> None:
    import benchmarks.harness as harness
    from benchmarks.epoch_kernel_time import main

    make_loader, time_epoch = harness.make_loader, harness.time_epoch
    assert main(["--workload", "local_files", "--scale", "smoke", "--out", str(tmp_path)]) == 0
    assert (harness.make_loader, harness.time_epoch) == (make_loader, time_epoch)  # put back
    results = _check_results("epoch_kernel_time", tmp_path)
    labels = {r.config for r in results if r.case == "128 KB files"}
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


def _run_benchmarks(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks", "run", *args], capture_output=True, text=True, timeout=300, cwd=cwd
    )


@pytest.mark.slow
def test_run_quick_overhead_writes_outputs_and_prints_the_table(tmp_path: Path) -> None:
    done = _run_benchmarks("--quick", "--workload", "overhead", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "| ThreadLoader nw=0 |" in done.stdout and "| torch nw=2 persistent |" in done.stdout
    assert "## Targets" in done.stdout
    [suite_results] = [p.name for p in tmp_path.iterdir() if p.name.startswith("run-")]
    assert {p.name for p in tmp_path.iterdir()} == {"results.json", "results.md", "chart.png", suite_results}
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["scale"]["name"] == "quick"
    assert [w["name"] for w in results["workloads"]] == ["overhead"]
    assert results["command"] == f"python -m benchmarks run --quick --workload overhead --out {tmp_path}"
    targets = [r for r in _check_results("run", tmp_path) if r.metric.startswith("target: ")]
    assert len(targets) == len(results["workloads"][0]["targets"]) == 4


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


def test_step_wait_reports_every_loader_beside_the_queue(tmp_path: Path) -> None:
    from benchmarks import step_wait

    args = ["--steps", "5", "--repeats", "1", "--workers", "2", "--step-ms", "1", "--out", str(tmp_path)]
    assert step_wait.main(args) == 0
    results = _check_results("step_wait", tmp_path)
    loaders = step_wait.loaders(2, 1)
    for kind in step_wait.STEPS:
        case = [r for r in results if r.case == f"2 workers, {kind} 1 ms"]
        # every loader, for both kinds of step, each with its ratio to the queue of the same round
        assert {r.config for r in case} == set(loaders)
        ratios = {r.config for r in case if r.metric in ("p50 / queue", "p99 / queue")}
        assert ratios == set(loaders) - {step_wait.QUEUE}


def test_per_batch_measures_every_path_on_this_interpreter() -> None:
    from benchmarks.per_batch import PLAIN, THREADLOADER, measure

    for lists in (True, False):
        timings = measure(4, 64, lists, rounds=2)
        assert {THREADLOADER, PLAIN} <= set(timings)
        assert ("torch nw=0" in timings) is not lists
        assert all(len(ts) == 2 and all(t.wall > 0 and t.count == 16 for t in ts) for ts in timings.values())


def test_the_benchmark_server_samples_the_gets_in_flight_of_a_run() -> None:
    import asyncio

    from benchmarks.remote_throughput import BODY, bare_gets, observed
    from benchmarks.workloads.remote_http import LocalServer

    server = LocalServer(max_requests=8, delay=0.2, size=BODY)
    try:
        base = f"http://127.0.0.1:{server.port}"
        run = observed(server.port, lambda: asyncio.run(bare_gets(base, 8, 8)))
        idle = observed(server.port, lambda: asyncio.run(bare_gets(base, 0, 8)))
    finally:
        served = server.stop()
    assert served == 8, "the control requests are not counted as served"
    assert run.timing.count == 8 and run.in_flight and max(run.in_flight) <= 8
    assert max(run.in_flight) >= 1, "every GET waits 0.2 s in the server: some sample saw one"
    assert set(idle.in_flight) <= {0}
    figures = run.figures()
    assert 0 < figures["in flight, mean"] <= 8 and min(run.in_flight) <= figures["in flight, p10"] <= 8


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
