"""``klear-lab config EXPERIMENT --diff RUN`` of an RL run that started from ``model.init_from``: the run
records its starting point's run as ``model.name_or_path``, so the experiment compared with it must be resolved
as the run resolved it (it read "1 key differs, changes the hash": a review)."""

from __future__ import annotations

import json
from pathlib import Path

from klear_lab.cli import main

ROOT = Path(__file__).resolve().parents[2]
SFT = """base: {root}/experiments/quickstart/sft.yaml
run: {{name: tiny-sft, out_dir: {out}}}
sft: {{max_steps: 2}}
data: {{sources: [{{name: arith_r1, n_prompts: 50, levels: [1], level_weights: [1.0]}}],
       eval_sources: [{{name: arith, levels: [1], level_weights: [1.0], n_prompts: 4}}]}}
eval: {{max_new_tokens: 8}}
"""
RL = """base: {root}/experiments/quickstart/rl.yaml
run: {{name: tiny-rl, out_dir: {out}}}
model: {{init_from: sft_tiny.yaml}}
rl: {{steps: 1, prompts_per_step: 4, minibatch_prompts: 4, group_size: 2, max_new_tokens: 8, eval_every: 0}}
data: {{sources: [{{name: arith, n_prompts: 20, levels: [1], level_weights: [1.0]}}],
       eval_sources: [{{name: arith, levels: [1], level_weights: [1.0], n_prompts: 4}}]}}
eval: {{max_new_tokens: 8}}
"""


def test_an_rl_experiment_against_its_run_is_the_same_config(tmp_path, capsys):
    out = tmp_path / "runs"
    (tmp_path / "sft_tiny.yaml").write_text(SFT.format(root=ROOT, out=out))
    (tmp_path / "rl_tiny.yaml").write_text(RL.format(root=ROOT, out=out))
    assert main(["train", str(tmp_path / "rl_tiny.yaml")]) == 0  # trains its starting point first
    (run,) = out.glob("tiny-rl-*")
    capsys.readouterr()
    assert main(["config", str(tmp_path / "rl_tiny.yaml"), "--diff", str(run)]) == 0
    shown = capsys.readouterr().out
    assert "no differences: the same config" in shown
    assert f"config hash {json.loads((run / 'run.json').read_text())['config_hash']}" in shown
    # its starting point now only in a sweep's directory beside runs/: a train would link it back (the dry run
    # says so), and record the copy's path: resolved here as that, it read "model.name_or_path: null"
    (sft,) = out.glob("tiny-sft-*")
    swept = tmp_path / "sweep_runs" / "s" / "runs" / sft.name
    swept.parent.mkdir(parents=True)
    sft.rename(swept)
    assert main(["config", str(tmp_path / "rl_tiny.yaml"), "--diff", str(run)]) == 0
    assert "no differences: the same config" in capsys.readouterr().out
    assert not (out / sft.name).exists()  # looked up, not linked
    # a trial of that sweep records the sweep's own path: the same run under another path, another hash
    saved = (run / "config.yaml").read_text().replace(str(out.resolve() / sft.name), str(swept.resolve()))
    assert saved != (run / "config.yaml").read_text()
    (tmp_path / "trial.yaml").write_text(saved)
    assert main(["config", str(tmp_path / "rl_tiny.yaml"), "--diff", str(tmp_path / "trial.yaml")]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "1 key(s) differ (1 of them change the config hash)" in shown
    assert f"note: model.name_or_path: both start from a run named {sft.name}, under two paths" in shown
