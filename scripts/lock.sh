#!/usr/bin/env bash
# Rewrite constraints.txt from a fresh resolve: a new .venv-lock, torch first (see bootstrap.sh), then
# klear-lab with its dev extras and no constraints. Review the diff, run the tests, then commit it.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .venv-lock && "${PYTHON:-python3}" -m venv .venv-lock
.venv-lock/bin/pip install -q "torch==${KLEAR_TORCH_VERSION:-2.13.0}"
.venv-lock/bin/pip install -q ".[dev]"
{ sed -n '1,3p' constraints.txt
  .venv-lock/bin/pip freeze | grep -viE "^(-e |#|klear-lab|torch==)" | sort -f; } > constraints.txt.new
mv constraints.txt.new constraints.txt && rm -rf .venv-lock
git --no-pager diff --stat constraints.txt || true
