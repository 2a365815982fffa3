#!/usr/bin/env bash
# Creates .venv (once) and installs the project with its test and bench extras (or the extras
# in EXTRAS): what scripts/test.sh, scripts/demo.sh, benchmarks/run.sh and scripts/lint.sh need.
# torch and torchvision are installed first, pinned to builds known to work with this
# project: x86_64 gets torch 2.14.1 / torchvision 0.29.1, aarch64 gets torch 2.9.1 /
# torchvision 0.24.1. An environment that already imports both keeps what it has.
# PYTHON names the interpreter that makes .venv (default: python3, 3.11 or newer).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
case "$(uname -m)" in
    aarch64|arm64) TORCH="torch==2.9.1 torchvision==0.24.1" ;;
    *) TORCH="torch==2.14.1 torchvision==0.29.1" ;;
esac
if ! .venv/bin/python -c "import torch, torchvision" >/dev/null 2>&1; then
    # shellcheck disable=SC2086
    .venv/bin/pip install --quiet $TORCH
fi
# EXTRAS names the extras to install (default: test,bench; the demo asks for `demo` alone).
.venv/bin/pip install --quiet -e ".[${EXTRAS:-test,bench}]"
