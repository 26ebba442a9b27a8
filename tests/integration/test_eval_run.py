"""``klear-lab eval``: score a finished run's model again (avg@k), as a run of its own."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from klear_lab.config.compose import compose
from klear_lab.errors import ConfigError
from klear_lab.run import run_experiment
from klear_lab.stages.eval import eval_config

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = str(ROOT / "experiments/quickstart/sft.yaml")
# A 3-step model answers nothing right; this verifier passes about half of any sampled completions,
# so equal metrics below mean equal samples.
EVEN_LENGTH = """
from dataclasses import dataclass
from klear_lab.registry import REWARD
from klear_lab.rewards.base import RewardOutput

@REWARD.register("test_even_length")
@dataclass(frozen=True)
class EvenLength:
    \"\"\"Test verifier: a completion passes when its length is even.\"\"\"
    def __call__(self, completions, records):
        return [RewardOutput(score=0.0, acc=len(c) % 2 == 0, format_ok=True) for c in completions]
"""


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("trained")
    plugin = out / "even_length.py"
    plugin.write_text(EVEN_LENGTH)
    cfg = compose(QUICKSTART, [f"run.out_dir={out}", f"plugins=[{plugin}]", "eval.reward=test_even_length",
                               "data.sources.0.n_prompts=120", "sft.max_steps=3",
                               "data.eval_sources.0.n_prompts=6", "eval.max_new_tokens=16", "trainer.checkpoint=false",
                               "sft.tokens_per_micro_batch=1000", "eval.samples=3", "eval.temperature=0.6",
                               "eval.top_p=0.95", "tracking.wandb.enabled=false"])
    return run_experiment(cfg)


def test_eval_of_a_run_repeats_its_final_evaluation(trained, tmp_path):
    cfg = eval_config(trained.run_dir, [f"run.out_dir={tmp_path}", "tracking.wandb.enabled=true"])
    assert cfg["run"]["kind"] == "eval" and cfg["model"]["name_or_path"] == str(trained.run_dir.resolve())
    result = run_experiment(cfg)
    assert 0 < trained.metrics["val/acc"] < 1
    for key in ("val/acc", "val/pass_at_k", "val/samples", "val/n"):  # same model, seed and protocol
        assert result.metrics[key] == pytest.approx(trained.metrics[key]), key
    assert result.wandb_dir is not None and list(result.wandb_dir.glob("run-*.wandb"))  # a W&B run of its own
    rows = [json.loads(line) for line in (result.run_dir / "eval_samples.jsonl").read_text().splitlines()]
    assert len(rows) == 6 and all(len(r["completions"]) == len(r["verdicts"]) == 3 for r in rows)
    assert sum(r["score"] for r in rows) / 6 == pytest.approx(result.metrics["val/acc"])
    saved = yaml.safe_load((result.run_dir / "config.yaml").read_text())
    assert run_experiment(saved).metrics["val/acc"] == result.metrics["val/acc"]  # reproducible from its config


def test_eval_command_with_another_protocol(trained, tmp_path):
    cmd = [sys.executable, "-m", "klear_lab.cli", "eval", str(trained.run_dir), f"run.out_dir={tmp_path}",
           "eval.samples=1", "eval.temperature=0", "eval.top_p=1.0", "tracking.wandb.enabled=false"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, env={**_env(), "COLUMNS": "200"})
    assert out.returncode == 0, out.stderr[-2000:]
    run_dir = next(tmp_path.glob("*-eval-*"))
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["val/n"] == 6 and "val/pass_at_k" not in summary and "val/acc" in out.stdout


def test_a_sources_own_samples_reach_the_run_and_its_files(trained, tmp_path):
    """eval.samples_per_source (the paper's avg@64 AIME beside avg@8 LiveCodeBench): each problem of that
    source gets its k (here every problem: one source), the first 3 are the run's own avg@3 samples."""
    cfg = eval_config(trained.run_dir, [f"run.out_dir={tmp_path}", "eval.samples_per_source.arith=5"])
    result = run_experiment(cfg)
    rows = [json.loads(line) for line in (result.run_dir / "eval_samples.jsonl").read_text().splitlines()]
    assert [len(r["completions"]) for r in rows] == [5] * 6 and result.metrics["val/samples"] == 5
    before = {r["uid"]: r["completions"] for r in map(json.loads, (trained.run_dir / "eval_samples.jsonl")
                                                      .read_text().splitlines())}
    assert all(r["completions"][:3] == before[r["uid"]] for r in rows)
    with pytest.raises(ConfigError, match="eval.samples_per_source.lcb_v5 names no held-out source"):  # at compose
        run_experiment(eval_config(trained.run_dir, [f"run.out_dir={tmp_path}", "eval.samples_per_source.lcb_v5=8"]))


def test_eval_run_is_labelled_and_written_beside_the_run_it_scores(trained, tmp_path, capsys):
    from klear_lab.cli import main

    moved = tmp_path / "elsewhere" / trained.run_dir.name  # a run directory copied to another place
    shutil.copytree(trained.run_dir, moved)
    cfg = eval_config(moved)
    assert cfg["run"]["out_dir"] == str(moved.parent) and cfg["run"]["job_type"] == "eval"
    run_id = json.loads((moved / "run.json").read_text())["run_id"]  # the scored run's W&B id
    assert cfg["run"]["tags"][:2] == ["eval", f"evaluates:{run_id}"] and cfg["run"]["name"].endswith("-eval")
    scored = json.loads((moved / "run.json").read_text())["group"]
    assert cfg["run"]["group"] == scored  # in the scored run's W&B group (it was "<name>-eval", a group of its own)
    assert main(["eval", str(moved), "--dry-run"]) == 0
    assert "avg@3, temperature 0.6, top_p 0.95" in capsys.readouterr().out
    assert [p.name for p in moved.parent.iterdir()] == [moved.name]  # a dry run writes nothing


def _run_dir(tmp: Path, status: str | None, model: bool = True, error: str | None = None, kind: str = "sft",
             scored: Path | str = "/runs/sft-1") -> Path:
    run = tmp / "run"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(f"run: {{name: x, kind: {kind}}}\nmodel: {{name_or_path: {scored}}}\n")
    if model:
        (run / "model").mkdir()
        (run / "model" / "config.json").write_text("{}")
    if status:
        (run / "run.json").write_text(json.dumps({"status": status, **({"error": error} if error else {})}))
    return run


@pytest.mark.parametrize(("make", "needle"), [
    (lambda tmp: tmp / "missing", "no such run directory or experiment file"),
    (lambda tmp: _run_dir(tmp, "completed", model=False), "the run completed but its final model"),
    (lambda tmp: _run_dir(tmp, None), "not a run directory"),
    # an eval run keeps no model: it said "the run completed but its final model (model/) is missing"
    (lambda tmp: _run_dir(tmp, "completed", model=False, kind="eval"),  # /runs/sft-1 is no run directory here
     r"an eval run, with no model of its own: it scored /runs/sft-1; score it again with the experiment file "
     r"that names it"),
    (lambda tmp: _run_dir(tmp, "completed", model=False, kind="eval", scored=_run_dir(tmp / "sft", "completed")),
     r"an eval run, with no model of its own: it scored \S*/sft/run; score that again with `klear-lab eval "
     r"\S*/sft/run`"),
    (lambda tmp: _run_dir(tmp, "failed"), r"run.json: status is 'failed': only a completed run"),
    # a stopped run lacks model/ too: it said "not a run directory with a final model" (a new-user walkthrough)
    (lambda tmp: _run_dir(tmp, "failed", model=False, error="interrupted (Ctrl-C)"),
     r"status is 'failed' \(interrupted \(Ctrl-C\)\): only a completed run has a final model to score$"),
])
def test_bad_eval_targets(tmp_path, make, needle):
    with pytest.raises(ConfigError, match=needle):
        eval_config(make(tmp_path))


def test_a_run_recorded_running_is_named_as_klear_lab_runs_names_it(tmp_path):
    """A ``kill -9``ed run (run.json still "running", its process gone) was refused as "status is 'running'"
    while ``klear-lab runs`` showed it stopped."""
    import os
    import socket
    import subprocess

    from klear_lab.run_owner import running_process

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    records = {"stopped": {"pid": dead.pid, "host": socket.gethostname(), "pid_start": 1},
               "running": running_process(),  # this test's own process: alive
               "unknown": {"pid": os.getpid(), "host": "elsewhere"}}
    for state, owner in records.items():
        run = _run_dir(tmp_path / state, "completed")
        (run / "run.json").write_text(json.dumps({"status": "running", **owner}))
        with pytest.raises(ConfigError, match=rf"run.json: status is '{state}'"):
            eval_config(run)
    with pytest.raises(ConfigError, match=r"status is 'unknown' \(running on elsewhere \(pid \d+\): not checked"):
        eval_config(tmp_path / "unknown" / "run")


def test_an_override_an_evaluation_does_not_read_is_refused(tmp_path, capsys):
    """``eval RUN optim.lr=5`` was accepted, and a ``compare --rescore optim.lr=1`` rescored every trial and
    titled its table after a key that changed nothing."""
    from klear_lab.cli import main

    run_dir = _run_dir(tmp_path, "completed")
    for bad in ("optim.lr=5", "sft.epochs=9", "rl.clip=ppo", "data.sources=[]", "model.tiny.size=7m"):
        with pytest.raises(ConfigError, match=f"{bad.split('=')[0]} does not change an evaluation"):
            eval_config(run_dir, [bad])
    assert main(["eval", str(run_dir), "optim.lr=5", "--dry-run"]) == 2
    assert "optim.lr does not change an evaluation" in capsys.readouterr().err
    from klear_lab.stages.eval import check_eval_overrides

    check_eval_overrides(["eval.samples=4", "data.eval_sources.0.n_prompts=3", "run.seed=2", "rl.rollout=vllm",
                          "data.world_seed=3", "trainer.accelerator=cpu",
                          "trainer.num_threads=1", "tracking.wandb.enabled=false", "model.dtype=bfloat16"])


def test_training_only_keys_and_a_rollout_engine_the_evaluation_does_not_start_are_refused(tmp_path):
    """A walkthrough found ``eval RUN rl.rollout=vllm`` (with ``eval.engine: generate``), ``eval.every_n_steps=5``
    and ``trainer.devices=2 trainer.strategy=ddp`` accepted: each changed the eval run's hash and nothing else."""
    run_dir = _run_dir(tmp_path, "completed")
    for bad, said in (("eval.every_n_steps=5", "the interval of evaluations during training"),
                      ("trainer.devices=2", "not read when scoring"), ("trainer.strategy=ddp", "not read when scoring"),
                      ("trainer.checkpoint_every=5", "not read when scoring"),
                      ("rl.rollout=vllm", "its eval.engine is 'generate'"),
                      ("rl.rollout.batch_size=4", "its eval.engine is 'generate'")):
        with pytest.raises(ConfigError, match=f"{bad!r}: .*{said}"):
            eval_config(run_dir, [bad])
    cfg = eval_config(run_dir, ["eval.engine=rollout", "rl.rollout=hf"])  # read through the rollout engine
    assert cfg["eval"]["engine"] == "rollout" and cfg["rl"]["rollout"]["name"] == "hf"


def test_eval_of_an_experiment_needs_a_trained_model(tmp_path, capsys):
    from klear_lab.cli import main

    for experiment in (QUICKSTART, QUICKSTART.replace("sft.yaml", "rl.yaml")):  # rl.yaml: its init_from too
        assert main(["eval", experiment, f"run.out_dir={tmp_path}"]) == 2
        assert "model.name_or_path: an eval run scores a trained model" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # nothing written


def test_a_dry_run_of_an_eval_without_a_trained_model_is_refused_as_the_eval_is(tmp_path, capsys):
    """``klear-lab eval experiments/quickstart/sft.yaml --dry-run`` printed a plan for a fresh tiny model."""
    from klear_lab.cli import main

    for experiment in (QUICKSTART, QUICKSTART.replace("sft.yaml", "rl.yaml")):
        assert main(["eval", experiment, f"run.out_dir={tmp_path}", "--dry-run"]) == 2
        out, err = capsys.readouterr()
        assert "dry run" not in out
        assert "model.name_or_path: an eval run scores a trained model" in err


def test_an_override_that_is_not_key_value_is_said_so(capsys):
    """``compare SWEEP --rescore notkv`` (and ``eval ... notkv``) said "notkv does not change an evaluation"."""
    from klear_lab.cli import main
    from klear_lab.stages.eval import check_eval_overrides

    for bad in ("notkv", "=3"):
        with pytest.raises(ConfigError, match=rf"^--rescore: override '{bad}' must look like key=value$"):
            check_eval_overrides(["eval.samples=2", bad], "--rescore")
    assert main(["eval", QUICKSTART, "notkv"]) == 2
    assert capsys.readouterr().err == "klear-lab: error: command line: override 'notkv' must look like key=value\n"


def _env() -> dict[str, str]:
    import os

    return {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}


def test_an_experiment_files_eval_keeps_the_group_its_base_sets(tmp_path):
    """The eval layer set the group from the top file's run section, dropping one a base: file set."""
    (tmp_path / "b.yaml").write_text(f"base: {ROOT / 'experiments/quickstart/sft.yaml'}\n"
                                     "run: {name: foo, group: mygroup}\n")
    (tmp_path / "x.yaml").write_text("base: b.yaml\n")
    cfg = eval_config(tmp_path / "x.yaml")
    assert (cfg["run"]["group"], cfg["run"]["name"], cfg["run"]["kind"]) == ("mygroup", "x-eval", "eval")


@pytest.mark.parametrize("seed", [0, 12345])
def test_the_eval_of_a_run_named_at_the_limit_cuts_the_name_it_derives(tmp_path, seed):
    """A run whose name fits its directory (226 bytes at seed 0) was refused by ``klear-lab eval`` for the
    ``<name>-eval`` it derives, a name the user never typed: that name is now cut to fit, whole characters."""
    from klear_lab.tracking import RUN_DIR_NAME_MAX, longest_run_dir_name

    longest = RUN_DIR_NAME_MAX - (len(longest_run_dir_name("x", seed)) - 1)  # bytes a run.name may have
    name = "é" * (longest // 2)  # two bytes each: a cut must not split one
    (tmp_path / "x.yaml").write_text(f"base: {ROOT / 'experiments/quickstart/sft.yaml'}\n"
                                     f"run: {{name: {name}, seed: {seed}}}\n")
    cfg = eval_config(tmp_path / "x.yaml")
    got = cfg["run"]["name"]
    assert got.endswith("-eval") and name.startswith(got.removesuffix("-eval"))
    assert len(longest_run_dir_name(got, seed).encode()) <= RUN_DIR_NAME_MAX < len(
        longest_run_dir_name(got.replace("-eval", "é-eval"), seed).encode())  # as long as fits, no longer
    short = tmp_path / "y.yaml"
    short.write_text(f"base: {tmp_path / 'x.yaml'}\nrun: {{name: abc}}\n")
    assert eval_config(short)["run"]["name"] == "abc-eval"
