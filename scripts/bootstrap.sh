#!/usr/bin/env bash
# Idempotent set-up on a fresh machine: system tools, a .venv with the CPU build of torch, klear-lab.
#   scripts/bootstrap.sh          # runtime install
#   scripts/bootstrap.sh dev      # + test dependencies (pytest, psycopg, PostgreSQL server, bubblewrap)
set -euo pipefail
cd "$(dirname "$0")/.."
extra="${1:-}"
need_apt=()
command -v bwrap >/dev/null 2>&1 || need_apt+=(bubblewrap)
if [ "$extra" = dev ] && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  need_apt+=(postgresql)
fi
if [ "${#need_apt[@]}" -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "[bootstrap] apt-get install ${need_apt[*]}"
  apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
PY="${PYTHON:-python3}"
pip_install() {  # pip's own exit status, without the "WARNING: Location ... is ignored" lines of this
  # machine's pip index configuration (they were printed for every package of the torch install)
  .venv/bin/pip install -q "$@" 2>&1 | { grep -v "^WARNING: Location" || true; }
  return "${PIPESTATUS[0]}"
}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
# torch first: on these CPU machines only torch==2.13.0 resolves to the local CPU build; any other
# requirement pulls a multi-GB CUDA build. GPU users install their own torch before this script.
if ! .venv/bin/python -c "import torch" >/dev/null 2>&1; then
  echo "[bootstrap] installing torch (CPU build)"
  pip_install "torch==${KLEAR_TORCH_VERSION:-2.13.0}"
fi
spec="."
[ "$extra" = dev ] && spec=".[dev]"
# constraints.txt: the versions the tests and the README's figures were measured with (KLEAR_CONSTRAINTS=
# empty: resolve the newest that pyproject.toml allows; a path: another lock)
constraints="${KLEAR_CONSTRAINTS-constraints.txt}"
cflag=()
[ -n "$constraints" ] && cflag=(-c "$constraints")
stamp=".venv/.klear-installed-$(cat pyproject.toml ${constraints:+"$constraints"} | sha1sum | cut -c1-12)-${extra:-rt}"
if [ ! -f "$stamp" ]; then
  echo "[bootstrap] installing klear-lab $spec${constraints:+ (versions: $constraints)}"
  pip_install "${cflag[@]}" -e "$spec"
  .venv/bin/python -c "import klear_lab, lightning, transformers, optuna, wandb" 
  touch "$stamp"
fi
echo "[bootstrap] ready: .venv/bin/klear-lab"
