"""End-to-end SFT through run_experiment and the CLI: run directory, W&B offline, reproducibility, bad input."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest
import yaml

from klear_lab.cli import main
from klear_lab.config.compose import compose
from klear_lab.run import run_experiment

QUICKSTART = str(Path(__file__).resolve().parents[2] / "experiments/quickstart/sft.yaml")


def test_sft_smoke_run_and_reproduce_from_saved_config(repo_root, tiny_sft_overrides, monkeypatch, capfd):
    monkeypatch.chdir(repo_root)
    monkeypatch.delenv("WANDB_MODE", raising=False)  # the config's mode (offline) decides
    result = run_experiment(compose(QUICKSTART, tiny_sft_overrides))
    run_dir = result.run_dir
    assert "WANDB_MODE" not in os.environ  # Lightning sets it to dryrun for an offline run: put back
    for name in ("config.yaml", "run.json", "summary.json", "csv/metrics.csv", "model/config.json",
                 "model/tokenizer.json"):
        assert (run_dir / name).is_file(), name
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["_identity"]["config_hash"] and summary["_identity"]["git_commit"]
    assert 0.0 <= summary["val/acc"] <= 1.0 and summary["val/n"] == 8
    assert summary["train/steps"] == 3 and summary["perf/tokens_per_s"] > 0
    assert json.loads((run_dir / "run.json").read_text())["status"] == "completed"
    rows = list(csv.DictReader((run_dir / "csv" / "metrics.csv").open()))
    losses = [float(r["train/loss"]) for r in rows if r.get("train/loss")]
    assert losses, "train/loss logged to CSV"
    offline = list((run_dir / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(offline) == 1 and offline[0].stat().st_size > 0
    assert "anonymous setting" not in capfd.readouterr().err  # Lightning's anonymous=None, dropped
    # reproduce from the saved resolved config and seed: same loss curve
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    again = run_experiment(saved)
    rows2 = list(csv.DictReader((again.run_dir / "csv" / "metrics.csv").open()))
    assert [float(r["train/loss"]) for r in rows2 if r.get("train/loss")] == losses


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize(("body", "needle"), [
    ("optim: {lr: [\n", "malformed YAML"),
    ("optim: {lrr: 0.1}\n", "did you mean"),
    ("optim: {lr: fast}\n", "expected float"),
    ("data: {mix: {name: nope}}\n", "unknown data_mix"),
    ("data:\n  sources: [{name: file, path: /nonexistent/data.jsonl}]\n", "/nonexistent/data.jsonl"),
])
def test_bad_input_exits_2_and_leaves_no_run(tmp_path, capsys, body, needle):
    head = f"base: {Path(QUICKSTART).resolve()}\nrun: {{out_dir: {tmp_path}/runs}}\n"
    exp = _write(tmp_path, "bad.yaml", head + body)
    assert main(["train", str(exp)]) == 2
    assert needle in capsys.readouterr().err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_bad_row_names_file_row_field(tmp_path, capsys):
    data = _write(tmp_path, "d.jsonl", '{"messages": [{"role": "user", "content": "hi"}, '
                  '{"role": "assistant", "content": "<think>x</think>1"}]}\n{"messages": 3}\n')
    exp = _write(tmp_path, "e.yaml", f"base: {Path(QUICKSTART).resolve()}\nrun: {{out_dir: {tmp_path}/runs}}\n"
                 f"data:\n  sources: [{{name: file, path: {data}, format: messages}}]\n")
    assert main(["train", str(exp)]) == 2
    err = capsys.readouterr().err
    assert str(data) in err and "row 2" in err and "messages" in err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


@pytest.mark.slow
def test_compiled_training_forward_matches_eager(repo_root, tiny_sft_overrides, monkeypatch):
    """``trainer.compile=true`` compiles the training forward only: same losses, same saved weights' keys."""
    from safetensors import safe_open

    monkeypatch.chdir(repo_root)
    curves, keys = [], []
    for flag in ("false", "true"):
        run_dir = run_experiment(compose(QUICKSTART, [*tiny_sft_overrides, f"trainer.compile={flag}"])).run_dir
        rows = list(csv.DictReader((run_dir / "csv" / "metrics.csv").open()))
        curves.append([float(r["train/loss"]) for r in rows if r.get("train/loss")])
        with safe_open(str(run_dir / "model" / "model.safetensors"), "pt") as f:
            keys.append(sorted(f.keys()))
    assert len(curves[0]) == len(curves[1]) == 3
    assert curves[1] == pytest.approx(curves[0], rel=1e-3)
    assert keys[0] == keys[1]


def test_examples_longer_than_max_length_are_dropped_with_a_warning(tiny_sft_overrides):
    from klear_lab.stages.sft import prepare_sft

    # level-1 traces of arith_r1 are 98-100 tokens, level-2 ones 140-142: max_length 120 drops level 2
    cfg = compose(QUICKSTART, [*tiny_sft_overrides, "data.sources.0.levels=[1,2]",
                               "data.sources.0.level_weights=[1.0,1.0]", "data.max_length=120"])
    with pytest.warns(UserWarning, match=r"data.max_length=120: \d+ of 120 SFT examples .* were dropped") as caught:
        stage = prepare_sft(cfg)
    dropped = stage.plan["plan/dropped_too_long"]
    assert 30 < dropped < 90 and f"{int(dropped)} of 120" in str(caught[0].message)


def test_avg_at_k_evaluation_in_a_run(repo_root, tiny_sft_overrides, monkeypatch):
    """``eval.samples=4`` at the paper's temperature: val/acc is mean pass@1 over the samples."""
    monkeypatch.chdir(repo_root)
    cfg = compose(QUICKSTART, [*tiny_sft_overrides, "eval.samples=4", "eval.temperature=0.6", "eval.top_p=0.95"])
    summary = json.loads((run_experiment(cfg).run_dir / "summary.json").read_text())
    assert summary["val/samples"] == 4 and summary["val/n"] == 8
    assert 0.0 <= summary["val/acc"] <= summary["val/pass_at_k"] <= 1.0


def test_a_pruned_run_is_recorded_as_pruned_not_failed(tiny_sft_overrides, capsys, monkeypatch):
    """A sweep's pruner stopping a run wrote status failed and finished its W&B run with exit code 1."""
    import lightning as L
    import optuna

    from klear_lab import loggers

    class Prune(L.Callback):
        def on_train_batch_end(self, trainer, *args) -> None:
            raise optuna.TrialPruned("trial was pruned at step 1")

    finished = []
    real_finish = loggers.finish_wandb_run
    monkeypatch.setattr(loggers, "finish_wandb_run", lambda exit_code: (finished.append(exit_code),
                                                                         real_finish(exit_code)))
    cfg = compose(Path(__file__).resolve().parents[2] / "experiments/quickstart/sft.yaml", tiny_sft_overrides)
    with pytest.raises(optuna.TrialPruned):
        run_experiment(cfg, callbacks=[Prune()])
    (run_json,) = Path(cfg["run"]["out_dir"]).glob("*/run.json")
    record = json.loads(run_json.read_text())
    assert record["status"] == "pruned"
    assert record["error"] == "optuna.exceptions.TrialPruned: trial was pruned at step 1"
    assert finished == [0]
    capsys.readouterr()
    assert main(["runs", str(run_json.parents[1]), "--status", "pruned", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "pruned"


def test_a_run_that_records_nowhere_but_its_summary_completes(tiny_sft_overrides):
    """With tracking.csv=false and W&B off, Lightning's LR monitor failed the run once its directory existed."""
    cfg = compose(Path(__file__).resolve().parents[2] / "experiments/quickstart/sft.yaml",
                  [*tiny_sft_overrides, "tracking.csv=false", "tracking.wandb.enabled=false"])
    result = run_experiment(cfg)
    assert result.metrics["train/steps"] == 3 and not (result.run_dir / "csv").exists()


def test_without_evaluations_during_training_sft_evaluates_once_at_the_end(tiny_sft_overrides):
    """eval.every_n_steps=0 ("at the end only") evaluated at every epoch's end and then again at the end."""
    from klear_lab.tracking import csv_rows

    cfg = compose(Path(__file__).resolve().parents[2] / "experiments/quickstart/sft.yaml",
                  [*tiny_sft_overrides, "sft.max_steps=30"])  # 12 steps an epoch
    result = run_experiment(cfg)
    evaluated = [int(r["step"]) for r in csv_rows(result.run_dir / "csv" / "metrics.csv") if r.get("val/acc")]
    assert evaluated == [30]


def test_tokens_per_second_counts_training_time_and_the_summary_is_the_last_row(tiny_sft_overrides):
    """perf/tokens_per_s was computed in a step's first forward (the first row: a step's tokens over one forward's
    seconds) and the summary's over fit's whole time, evaluations included; both are now the tokens trained
    over the training seconds at a step's end, and evaluations are logged at the steps done."""
    from klear_lab.tracking import csv_rows

    cfg = compose(Path(__file__).resolve().parents[2] / "experiments/quickstart/sft.yaml",
                  [*tiny_sft_overrides, "eval.every_n_steps=1"])
    result = run_experiment(cfg)
    rows = csv_rows(result.run_dir / "csv" / "metrics.csv")
    logged = [float(r["perf/tokens_per_s"]) for r in rows if r.get("perf/tokens_per_s")]
    assert len(logged) == 3 and result.metrics["perf/tokens_per_s"] == pytest.approx(logged[-1])
    # perf/train_seconds is fit's wall time, and eval_seconds the evaluations: test_sft_timing.py checks
    # which seconds each holds
    assert result.metrics["perf/eval_seconds"] > 0
    assert [int(r["step"]) for r in rows if r.get("val/acc")] == [1, 2, 3]


def test_an_epoch_trains_every_batch_with_gradient_accumulation(tiny_sft_overrides):
    """12 batches with sft.grad_accum=5: Lightning steps at batches 5, 10 and 12 (the epoch's short last
    window); the plan said 12 // 5 = 2 steps, and sft.epochs=1 left 2 batches untrained."""
    import lightning as L

    class Count(L.Callback):
        batches = 0

        def on_train_batch_end(self, *args) -> None:
            Count.batches += 1

    cfg = compose(Path(__file__).resolve().parents[2] / "experiments/quickstart/sft.yaml",
                  [*tiny_sft_overrides, "sft.max_steps=0", "sft.epochs=1", "sft.grad_accum=5"])
    result = run_experiment(cfg, callbacks=[Count()])
    assert result.metrics["plan/steps_per_epoch"] == 3 and result.metrics["train/steps"] == 3
    assert Count.batches == 12


@pytest.mark.filterwarnings("ignore:optim.lr=1e-05 with torch.bfloat16 weights")  # the nearest arm's (the point)
def test_bf16_true_training_keeps_small_steps_with_stochastic_rounding(tiny_sft_overrides):
    """bfloat16 weights at lr 1e-5 (the tiny model's |w| ~ 0.02 has a spacing of ~1.2e-4), 3 steps: torch's
    AdamW rounds most steps back to the weight; stochastic rounding (the default) moves the weights as far
    as float32 training does, on average."""
    import lightning as L
    import torch

    from klear_lab.modules.bf16_adamw import StochasticRoundingAdamW

    class Moved(L.Callback):
        def on_train_start(self, trainer, module) -> None:
            self.optimizer = type(trainer.optimizers[0])
            self.start = {k: v.detach().float().clone() for k, v in module.model.named_parameters() if v.ndim >= 2}

        def on_train_end(self, trainer, module) -> None:
            now = {k: v.detach().float() for k, v in module.model.named_parameters()}
            self.dtype = module.model.get_input_embeddings().weight.dtype
            self.mean_step = sum(float((now[k] - w).abs().sum()) for k, w in self.start.items()) / sum(
                w.numel() for w in self.start.values())

    seen = {}
    for arm, precision in (("float32", ["trainer.precision=32-true", "model.dtype=float32"]),
                           ("stochastic", ["trainer.precision=bf16-true", "model.dtype=bfloat16"]),
                           ("nearest", ["trainer.precision=bf16-true", "model.dtype=bfloat16",
                                        "optim.bf16_rounding=nearest"])):
        seen[arm] = Moved()
        run_experiment(compose(Path(__file__).resolve().parents[2] / "experiments/quickstart/sft.yaml", [
            *tiny_sft_overrides, *precision, "optim.lr=1e-5", "optim.min_lr=1e-5", "optim.warmup_steps=0",
            "optim.schedule=constant", "eval.every_n_steps=0"]), callbacks=[seen[arm]])
    assert seen["stochastic"].optimizer is StochasticRoundingAdamW and seen["nearest"].optimizer is torch.optim.AdamW
    assert seen["stochastic"].dtype == seen["nearest"].dtype == torch.bfloat16
    steps = {arm: s.mean_step for arm, s in seen.items()}
    assert steps["stochastic"] / steps["float32"] == pytest.approx(1.0, abs=0.3), steps
    assert steps["nearest"] / steps["float32"] < 0.6, steps


def _weights(run_dir: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(run_dir / "model" / "model.safetensors"))


def grad_norms(run_dir: Path) -> list[float]:
    """The logged ``train/grad_norm`` of each optimizer step (before clipping)."""
    return [float(r["train/grad_norm"]) for r in csv.DictReader((run_dir / "csv" / "metrics.csv").open())
            if r.get("train/grad_norm")]


def test_step_token_mean_makes_accumulation_the_same_step_as_a_bigger_batch(tiny_sft_overrides):
    """sft.loss=step-token-mean: 2 accumulated micro-batches of 5 rows train the weights 1 batch of 10 rows
    does (each response token weighs the same in the step); token-mean weighs the two halves' tokens
    differently when their counts differ, so there the weights part."""
    quickstart = Path(__file__).resolve().parents[2] / "experiments/quickstart/sft.yaml"
    splits = {"accumulated": ["sft.tokens_per_micro_batch=500", "sft.grad_accum=2"],
              "whole": ["sft.tokens_per_micro_batch=1000", "sft.grad_accum=1"]}
    gaps, norms = {}, {}
    for loss in ("step-token-mean", "token-mean"):
        dirs = {name: run_experiment(compose(quickstart, [*tiny_sft_overrides, f"sft.loss={loss}",
                                                         "data.eval_sources=[]", *split])).run_dir
                for name, split in splits.items()}
        w = {name: _weights(d) for name, d in dirs.items()}
        gaps[loss] = max(float((w["accumulated"][k] - w["whole"][k]).abs().max()) for k in w["whole"])
        norms[loss] = {name: grad_norms(d) for name, d in dirs.items()}
        if loss == "step-token-mean":
            losses = {name: train_losses(d) for name, d in dirs.items()}
    assert gaps["step-token-mean"] < 1e-5, gaps
    assert gaps["token-mean"] > 100 * max(gaps["step-token-mean"], 1e-7), gaps
    # AdamW hides a gradient's scale from the weights; the logged gradient (before clipping) does not
    steps = norms["step-token-mean"]
    assert len(steps["whole"]) == 3 and steps["accumulated"] == pytest.approx(steps["whole"], rel=1e-4), norms
    # train/loss is each step's loss per response token, over both micro-batches (it was the second's alone)
    assert losses["accumulated"] == pytest.approx(losses["whole"], rel=1e-4), losses


def train_losses(run_dir: Path) -> list[float]:
    return [float(r["train/loss"]) for r in csv.DictReader((run_dir / "csv" / "metrics.csv").open())
            if r.get("train/loss")]


def test_token_mean_averages_a_short_step_over_its_own_micro_batches(tiny_sft_overrides):
    """8 prompts fill one micro-batch, so every step of grad_accum=2 holds one: Lightning's division by 2
    halved each step's gradient; now each is its micro-batch's mean, as with grad_accum=1."""
    quickstart = Path(__file__).resolve().parents[2] / "experiments/quickstart/sft.yaml"
    norms = {accum: grad_norms(run_experiment(compose(quickstart, [
        *tiny_sft_overrides, "sft.loss=token-mean", "data.sources.0.n_prompts=8", "sft.epochs=3",
        "data.eval_sources=[]", f"sft.grad_accum={accum}"])).run_dir) for accum in (1, 2)}
    assert len(norms[1]) == 3 and norms[2] == pytest.approx(norms[1], rel=1e-4), norms


def test_a_diverged_run_stops_and_is_recorded_as_failed(tmp_path, tiny_sft_overrides, capsys):
    """``optim.lr=1e30`` made every weight NaN, and the run said "completed" with exit 0 (found by a probe)."""
    args = [QUICKSTART, *tiny_sft_overrides, "optim.lr=1e30", "optim.min_lr=0", "optim.warmup_steps=0"]
    code = main(["train", *args])
    assert code == 1
    assert "training diverged: train/grad_norm is nan at step" in capsys.readouterr().err
    (run_dir,) = [p for p in (tmp_path / "runs").iterdir() if not p.name.startswith(".")]
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "failed" and "diverged" in record["error"]
    assert record["command"] == ["klear-lab", "train", *args]  # the overrides, which the config alone does not say
