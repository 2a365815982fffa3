#!/usr/bin/env bash
# Creates .venv (once) and installs the project with its test and benchmark extras.
# torch and torchvision are pinned to the builds that this machine image carries on disk,
# so pip takes them from the local cache instead of downloading gigabytes.
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
.venv/bin/pip install --quiet -e '.[test,bench]'
