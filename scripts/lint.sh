#!/usr/bin/env bash
# The lint checks, the same as .pre-commit-config.yaml: ruff's rules, ruff's formatting (checked,
# not applied) and the type checker. Settings live in pyproject.toml. Runs all three, then
# fails if any failed. Run `bash scripts/setup-venv.sh` first, or set PYTHON to an
# interpreter whose environment has the test extra.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
status=0
"$PY" -m ruff check . || status=1
"$PY" -m ruff format --check . || status=1
"$PY" -m mypy || status=1
exit "$status"
