#!/usr/bin/env bash
# Sets everything up (a .venv of its own) and runs the whole test suite, then the type checker.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-venv.sh
.venv/bin/python -m pytest -q "$@"
.venv/bin/python -m mypy
