#!/usr/bin/env bash
# Sets everything up (a .venv of its own), runs the whole test suite, then the lint checks
# (ruff, ruff format --check, mypy strict; scripts/lint.sh). Fails if either failed.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-venv.sh || exit 1
status=0
.venv/bin/python -m pytest -q --durations=15 "$@" || status=$?
bash scripts/lint.sh || status=1
exit "$status"
