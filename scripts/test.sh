#!/usr/bin/env bash
# The README's test command: install (idempotent) and run the default (fast) test set.
#   scripts/test.sh                 # default set (slow and GPU tests deselected)
#   scripts/test.sh -m slow         # the slow set (real SmolLM2, full quickstart runs)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh dev
export HF_HUB_OFFLINE=1 WANDB_MODE=offline WANDB_SILENT=true TOKENIZERS_PARALLELISM=false
exec .venv/bin/python -m pytest "$@"
