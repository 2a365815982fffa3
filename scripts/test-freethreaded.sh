#!/usr/bin/env bash
# Runs the test suite on a free-threaded CPython (3.13t, the GIL disabled).
#
#   bash scripts/test-freethreaded.sh [TOOL] [-- PYTEST ARGS...]
#
# TOOL is the script that builds the free-threaded interpreter and its venv (torch's
# free-threaded wheels, numpy, pillow, aiohttp, fsspec, pytest, hypothesis) and prints the venv's
# python on its last line; default: $FT_TOOL, else the first of ../shared/tools/freethreaded.sh
# and ../../shared/tools/freethreaded.sh (a worktree one level further down) that exists. It is
# idempotent: a finished build and venv are reused. This script then installs the project
# (--no-deps, editable) and the test dependencies that have free-threaded wheels
# (--only-binary=:all:), checks that the GIL is off after importing torch and the package, and
# runs pytest. What cannot be installed there (moto, cryptography, Lightning) makes the tests
# that need it skip, each naming why (tests/conftest.py). With FT_SETUP_ONLY=1 it stops after
# the check and prints the venv's python instead (scripts/stress-freethreaded.sh uses it).
set -euo pipefail
cd "$(dirname "$0")/.."
tool=${FT_TOOL:-}
if [ -z "$tool" ]; then
  for t in ../shared/tools/freethreaded.sh ../../shared/tools/freethreaded.sh; do
    if [ -f "$t" ]; then tool=$t; break; fi
  done
  tool=${tool:-../shared/tools/freethreaded.sh}
fi
if [ $# -gt 0 ] && [ "$1" != "--" ]; then tool=$1; shift; fi
[ "${1:-}" = "--" ] && shift
[ -f "$tool" ] || { echo "no build script at $tool: pass its path (or set FT_TOOL)" >&2; exit 2; }
py=$(bash "$tool" | tail -n 1)
"$py" -m pip install -q --no-deps -e . >&2
# One at a time: a package without a free-threaded wheel is left out, not the whole list.
for req in pytest-timeout pytest-xdist "s3fs>=2024.2" "botocore>=1.34" matplotlib tqdm; do
  "$py" -m pip install -q --only-binary=:all: "$req" >/dev/null 2>&1 || echo "not installable here: $req" >&2
done
"$py" -c "import sys, torch, datapipes, torch_threadloader; assert not sys._is_gil_enabled(), 'the GIL is on'"
if [ -n "${FT_SETUP_ONLY:-}" ]; then echo "$py"; exit 0; fi
exec env PYTHONPATH="$PWD" "$py" -m pytest -q -p no:cacheprovider "$@"
