#!/usr/bin/env bash
# Stress runs on a free-threaded CPython (3.13t, the GIL disabled), under load: the concurrency
# and lifecycle test files (not the resume matrices), N runs in a row (default 20), with two CPU
# hogs (`while True: pass`) running the whole time, stopping at the first failing run.
#
#   bash scripts/stress-freethreaded.sh [N] [-- PYTEST ARGS...]
#
# The venv is set up once by scripts/test-freethreaded.sh (FT_SETUP_ONLY=1; its build script:
# $FT_TOOL, else ../shared/tools/freethreaded.sh; it installs this tree editable there and
# checks the GIL is off); the files are collected once before the hogs start. Each run is one
# `pytest -x -p no:randomly` over the files with STRESS_WORKERS xdist workers (default 4, twice
# the hogs), so the tests also contend with each other and with the hogs. The hogs are started
# before the first run and killed by a trap on exit, whatever ends the script. Prints each run's
# result and time, and at the end how many runs passed in a row and the total time; exits
# non-zero if a run failed.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=20
if [ $# -gt 0 ] && [ "$1" != "--" ]; then runs=$1; shift; fi
[ "${1:-}" = "--" ] && shift
# The files whose tests race threads against each other: bounds, order, close, errors and state
# from other threads, lifecycle, the per-worker random state. The torch-equivalence, execution,
# skip, byte-budget and resume files (tests/datapipes/test_state.py, tests/resume/), and what
# worker processes give (tests/processes/test_results.py), run in the ordinary tiers on 3.13t
# (scripts/test-freethreaded.sh).
files=(
  tests/datapipes/test_bounds.py tests/datapipes/test_order.py tests/datapipes/test_lifecycle.py
  tests/datapipes/test_errors.py tests/datapipes/test_async.py
  tests/loader/test_lifecycle.py tests/loader/test_async.py tests/loader/test_error_contract.py
  tests/loader/test_random_state.py tests/processes/test_processes.py
)
# Left out of those files (node-id prefixes): the tests whose time is new interpreters importing
# torch, not threads racing: torch's own worker processes as the oracle of the random state,
# a worker process's own state, a script's worker processes taking Ctrl-C, a child's error and
# lifetime, torch.compile. Each took a minute or more beside the hogs. The parent's threads racing
# worker processes stay (tests/processes/test_processes.py, the error contract's processes modes).
startup=(
  "tests/loader/test_random_state.py::test_fakedata_gives_its_own_items_in_every_mode[processes]"
  "tests/loader/test_random_state.py::test_an_iterable_datasets_workers_own_their_state[processes]"
  "tests/loader/test_random_state.py::test_own_random_state_false_leaves_the_workers_on_the_processs_state[processes]"
  "tests/loader/test_random_state.py::test_random_items_are_dataloaders_for_the_same_seed_over_three_epochs"
  "tests/loader/test_random_state.py::test_without_a_generator_the_seed_and_the_callers_state_are_torchs"
  "tests/loader/test_random_state.py::test_worker_processes_give_dataloaders_random_items"
  "tests/loader/test_random_state.py::test_worker_init_fn_seeds_the_workers_own_state_as_in_a_process"
  "tests/loader/test_random_state.py::test_torch_compile_traces_pythons_random_as_without_the_package"
  "tests/loader/test_error_contract.py::test_ctrl_c_raises_in_a_waiting_next_when_another_thread_takes_the_signal[processes]"
  "tests/loader/test_error_contract.py::test_ctrl_c_raises_in_a_waiting_next_when_another_thread_takes_the_signal[processes-iterable]"
  "tests/loader/test_error_contract.py::test_a_timeout_raised_in_a_child_process_reaches_the_parent_as_itself"
  "tests/loader/test_error_contract.py::test_a_lost_worker_process_is_a_worker_lost_error_naming_it"
  "tests/processes/test_processes.py::test_no_child_outlives_its_parent_killed_or_exiting_mid_epoch"
)
deselect=()
for id in "${startup[@]}"; do deselect+=(--deselect "$id"); done
py=$(FT_SETUP_ONLY=1 bash scripts/test-freethreaded.sh | tail -n 1)
# every left-out id must still name a test (a renamed one would otherwise run again unseen)
env PYTHONPATH="$PWD" "$py" -m pytest -q -n 0 --collect-only -p no:randomly -p no:cacheprovider "$@" \
  "${startup[@]}" "${files[@]}" > /dev/null

log=$(mktemp /tmp/stress-freethreaded.XXXXXX.log)
hogs=()
stop_hogs() {
  for pid in "${hogs[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${hogs[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap stop_hogs EXIT
for _ in 1 2; do
  python3 -c "while True: pass" &
  hogs+=("$!")
done
echo "2 CPU hogs: ${hogs[*]}; $runs runs of ${#files[@]} files on $py"

workers=${STRESS_WORKERS:-4}
passed=0
start=$SECONDS
for ((run = 1; run <= runs; run++)); do
  t0=$SECONDS
  # --timeout: a test's script may take minutes to import torch beside the hogs (start-up, not a hang)
  if env PYTHONPATH="$PWD" "$py" -m pytest -q -n "$workers" -x --timeout 900 --durations=3 -p no:randomly -p no:cacheprovider "$@" \
    "${deselect[@]}" "${files[@]}" > "$log" 2>&1; then
    passed=$run
    echo "run $run: passed in $((SECONDS - t0)) s; $(tail -n 1 "$log"); slowest:"
    grep -A3 "slowest 3 durations" "$log" | tail -n 3
  else
    echo "run $run: FAILED in $((SECONDS - t0)) s; its output's end:"
    tail -n 80 "$log"
    echo "(the whole output: $log)"
    echo "$passed of $runs runs passed in a row before the failure ($((SECONDS - start)) s in all)"
    exit 1
  fi
done
rm -f "$log"
echo "$passed of $runs runs passed in a row ($((SECONDS - start)) s in all)"
