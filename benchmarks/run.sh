#!/usr/bin/env bash
# The full benchmark from a fresh clone, in one command: makes .venv (scripts/setup-venv.sh),
# then runs every workload and writes benchmarks/results/{results.json,results.md,chart.png}.
# Extra arguments go to the harness: bash benchmarks/run.sh --quick --workload remote
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-venv.sh
.venv/bin/python -m benchmarks run "$@"
