"""A chain of starting points (SFT -> RL -> RL): the middle run is found again like the first.

A parent with an ``init_from`` of its own records its config hash with that resolved (``model.name_or_path``
is its own parent's run); it was looked up with it unset, so every run of the chain's last link trained the
middle link again, and two identical runs of it hashed differently (found by a review)."""

from __future__ import annotations

import json
from pathlib import Path

from klear_lab.config.compose import compose
from klear_lab.run import run_experiment

QUICK = Path(__file__).resolve().parents[2] / "experiments/quickstart"
ARITH = "{name: arith, levels: [1], level_weights: [1.0], n_prompts: 4}"


def _chain(tmp: Path) -> Path:
    (tmp / "sft.yaml").write_text(
        f"base: {QUICK / 'sft.yaml'}\nrun: {{name: c-sft}}\n"
        "data: {sources: [{name: arith_r1, n_prompts: 200, levels: [1], level_weights: [1.0]}], "
        f"eval_sources: [{ARITH}]}}\n"
        "sft: {max_steps: 3, tokens_per_micro_batch: 1000}\neval: {max_new_tokens: 8}\n"
        "trainer: {checkpoint: false}\ntracking: {wandb: {enabled: false}}\n")
    rl = (f"data: {{sources: [{{name: arith, n_prompts: 20, levels: [1], level_weights: [1.0]}}], "
          f"eval_sources: [{ARITH}]}}\n"
          "rl: {group_filter: {name: none}, steps: 1, prompts_per_step: 4, group_size: 2, minibatch_prompts: 2, "
          "max_new_tokens: 8, eval_every: 0}\neval: {max_new_tokens: 8}\n"
          "trainer: {checkpoint: false}\ntracking: {wandb: {enabled: false}}\n")
    for name, parent in (("rl", "sft"), ("rl2", "rl")):
        (tmp / f"{name}.yaml").write_text(f"base: {QUICK / 'rl.yaml'}\nrun: {{name: c-{name}}}\n"
                                          f"model: {{init_from: {parent}.yaml}}\n{rl}")
    return tmp / "rl2.yaml"


def test_the_middle_of_a_chain_is_trained_once_and_its_child_hashes_alike(tmp_path, capsys):
    last = _chain(tmp_path)
    out = tmp_path / "runs"
    first = run_experiment(compose(last, [f"run.out_dir={out}"]))
    capsys.readouterr()
    again = run_experiment(compose(last, [f"run.out_dir={out}"]))
    (middle,) = [p for p in out.iterdir() if p.name.startswith("c-rl-")]
    said = capsys.readouterr().err  # which earlier run the model comes from
    assert f"model.init_from {tmp_path / 'rl.yaml'}: starting from its completed run {middle} (same config hash" in said
    runs = sorted(p.name for p in out.iterdir() if (p / "run.json").is_file())
    counts = {link: sum(n.startswith(f"{link}-") for n in runs) for link in ("c-sft", "c-rl", "c-rl2")}
    assert counts == {"c-sft": 1, "c-rl": 1, "c-rl2": 2}, runs  # the middle was trained twice
    hashes = {json.loads((r.run_dir / "run.json").read_text())["config_hash"] for r in (first, again)}
    assert len(hashes) == 1, hashes
