#!/usr/bin/env bash
# Sets up a .venv of its own with only what the demo runs (torch, torchvision, Pillow, tqdm:
# the `demo` extra), then runs the main demo on generated data. scripts/test.sh adds the rest.
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS=demo bash scripts/setup-venv.sh
.venv/bin/python examples/demo.py "$@"
