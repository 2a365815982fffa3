#!/usr/bin/env bash
# Sets everything up (a .venv of its own) and runs the main demo on generated data.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-venv.sh
.venv/bin/python examples/demo.py "$@"
