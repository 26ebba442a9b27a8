"""``eval.engine: rollout`` with ``rl.rollout.name: vllm``, end to end: an SFT run's evaluation and a
``klear-lab eval`` of it both decode on vLLM, with equal samples.

Runs where vllm imports (on CPU: ``scripts/setup_vllm_cpu.sh`` then
``.venv-vllm/bin/python -m pytest tests/integration/test_eval_vllm.py -m vllm``).
"""

from __future__ import annotations

import importlib.util
import json
import tempfile
from pathlib import Path

import pytest
import yaml

from klear_lab.config.compose import compose
from klear_lab.run import run_experiment
from klear_lab.stages.eval import eval_config

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                       reason="vllm is not importable here: run in .venv-vllm (scripts/setup_vllm_cpu.sh) or "
                              "install klear-lab[vllm] on GPU"),
]
ROOT = Path(__file__).resolve().parents[2]
EVEN_LENGTH = """
from dataclasses import dataclass
from klear_lab.registry import REWARD
from klear_lab.rewards.base import RewardOutput

@REWARD.register("test_even_length_vllm")
@dataclass(frozen=True)
class EvenLength:
    \"\"\"Test verifier: a completion passes when its length is even (about half of any samples).\"\"\"
    def __call__(self, completions, records):
        return [RewardOutput(score=float(len(c) % 2 == 0), acc=len(c) % 2 == 0, format_ok=True) for c in completions]
"""
# the quickstart model's head_dim 16 has no vLLM CPU kernel; 4 heads of 48 have one
ENGINE = ["model.tiny.num_heads=4", "model.tiny.num_kv_heads=2", "eval.engine=rollout", "rl.rollout.name=vllm",
          "rl.rollout.kv_cache_gib=0.5", "rl.rollout.warmup=false"]


@pytest.fixture(scope="module")
def plugin(tmp_path_factory):
    """One plugin file for the module: a name registers once per process."""
    path = tmp_path_factory.mktemp("plugin") / "even_length.py"
    path.write_text(EVEN_LENGTH)
    return path


def assert_eval_run_repeats(run, out: Path) -> None:
    """``klear-lab eval RUN`` (a fresh engine from the saved model) gets the run's final held-out numbers."""
    scored = run_experiment(eval_config(run.run_dir, [f"run.out_dir={out}"]))
    saved = yaml.safe_load((scored.run_dir / "config.yaml").read_text())
    assert saved["eval"]["engine"] == "rollout" and saved["rl"]["rollout"]["name"] == "vllm"
    for key in ("val/acc", "val/pass_at_k", "val/n"):  # same weights, seed and per-request seeds
        assert scored.metrics[key] == pytest.approx(run.metrics[key]), key
    rows = [json.loads(line) for line in (scored.run_dir / "eval_samples.jsonl").read_text().splitlines()]
    assert len(rows) == 6 and all(len(r["completions"]) == 3 for r in rows)
    assert len({c for r in rows for c in r["completions"]}) > 6
    final = [json.loads(line) for line in (run.run_dir / "eval_samples.jsonl").read_text().splitlines()]
    assert [r["completions"] for r in final] == [r["completions"] for r in rows]  # sample for sample


def test_sft_and_its_eval_run_decode_on_vllm(tmp_path, plugin):
    cfg = compose(ROOT / "experiments/quickstart/sft.yaml", [
        f"run.out_dir={tmp_path}", f"plugins=[{plugin}]", "eval.reward=test_even_length_vllm",
        "data.sources.0.n_prompts=120", "sft.max_steps=4", "eval.every_n_steps=2", "optim.lr=1e-3",
        "data.eval_sources.0.n_prompts=6",
        "eval.max_new_tokens=16", "trainer.checkpoint=false", "sft.tokens_per_micro_batch=1000", "eval.samples=3",
        "eval.temperature=0.6", "eval.top_p=0.95", "tracking.wandb.enabled=false", *ENGINE])
    trained = run_experiment(cfg)  # evaluations at steps 2 and 4: the engine gets the weights in between
    assert trained.metrics["val/samples"] == 3 and 0 < trained.metrics["val/acc"] < 1

    assert_eval_run_repeats(trained, tmp_path / "eval")


def test_rl_evaluates_on_its_rollout_engine_with_the_latest_weights(tmp_path, plugin):
    """The RL engine is shared by evaluation: its final numbers match a fresh engine on the saved policy."""
    cfg = compose(None, [
        "run.kind=rl", f"run.out_dir={tmp_path}", f"plugins=[{plugin}]", "rl.reward=test_even_length_vllm",
        "eval.reward=test_even_length_vllm", "rl.steps=3", "rl.prompts_per_step=4", "rl.group_size=4",
        "rl.minibatch_prompts=2", "rl.max_new_tokens=16", "rl.eval_every=0", "optim.lr=1e-3",
        "data.sources.0.n_prompts=40", "data.eval_sources.0.n_prompts=6", "eval.max_new_tokens=16",
        "eval.samples=3", "eval.temperature=0.6", "eval.top_p=0.95", "trainer.checkpoint=false",
        "tracking.wandb.enabled=false", *ENGINE])
    trained = run_experiment(cfg)
    assert trained.metrics["train/steps"] > 0 and "val/acc_start" in trained.metrics
    assert_eval_run_repeats(trained, tmp_path / "eval")


def test_an_rl_run_whose_prompts_cannot_fit_the_engine_stops_before_training(tmp_path, plugin):
    """Every prompt is checked against vLLM's context when the engine starts, not when a step draws it."""
    from klear_lab.errors import ConfigError

    cfg = compose(None, ["run.kind=rl", f"run.out_dir={tmp_path}", f"plugins=[{plugin}]",
                         "rl.reward=test_even_length_vllm", "rl.max_new_tokens=16", "rl.rollout.max_model_len=24",
                         "data.sources.0.n_prompts=40", "tracking.wandb.enabled=false", *ENGINE])
    with pytest.raises(ConfigError, match=r"40 of 40 prompts in data.sources \(the longest \d+ tokens\) "
                                          r"\+ max_new_tokens 16 exceed the vLLM engine's context of 24"):
        run_experiment(cfg)
    assert not any(tmp_path.rglob("summary.json"))


def test_an_sft_run_whose_held_out_prompts_cannot_fit_stops_before_training(tmp_path, plugin):
    """SFT evaluating during training starts its engine first and checks the held-out prompts against it."""
    from klear_lab.errors import ConfigError

    cfg = compose(ROOT / "experiments/quickstart/sft.yaml", [
        f"run.out_dir={tmp_path}", f"plugins=[{plugin}]", "eval.reward=test_even_length_vllm",
        "data.sources.0.n_prompts=120", "sft.max_steps=4", "eval.every_n_steps=2", "data.eval_sources.0.n_prompts=6",
        "eval.max_new_tokens=16", "rl.rollout.max_model_len=24", "trainer.checkpoint=false",
        "sft.tokens_per_micro_batch=1000", "tracking.wandb.enabled=false", *ENGINE])
    with pytest.raises(ConfigError, match=r"6 of 6 prompts in data.eval_sources \(the longest \d+ tokens\) "
                                          r"\+ max_new_tokens 16 exceed the vLLM engine's context of 24"):
        run_experiment(cfg)
    (run_dir,) = [p for p in tmp_path.iterdir() if not p.name.startswith(".")]
    assert json.loads((run_dir / "run.json").read_text())["status"] == "failed"
    assert not (run_dir / "summary.json").exists() and not (run_dir / "checkpoints" / "last.ckpt").exists()
    rows = run_dir / "csv" / "metrics.csv"
    assert not rows.exists() or "train/loss" not in rows.read_text()  # no step ran


def test_a_head_size_vllm_cannot_decode_is_named(tmp_path):
    from klear_lab.errors import ConfigError
    from klear_lab.models.tokenizer import train_tokenizer
    from klear_lab.registry import MODEL, ROLLOUT, SOURCE

    recs = SOURCE.build({"name": "arith_r1", "n_prompts": 20}).records(0, "train")
    tok = train_tokenizer([r.prompt + r.response for r in recs], vocab_size=300)
    model = MODEL.build({"name": "qwen2", "size": "2m", "num_heads": 12, "num_kv_heads": 12}).build(tok)  # quickstart
    before = set(Path(tempfile.gettempdir()).glob("klear-vllm-*"))
    with pytest.raises(ConfigError, match="no kernel for this model's head_dim 16 .*model.tiny.num_heads"):
        ROLLOUT.build({"name": "vllm", "kv_cache_gib": 0.25}).start(model, tok)  # the warmup decodes
    assert set(Path(tempfile.gettempdir()).glob("klear-vllm-*")) == before  # the failed engine cleaned up
