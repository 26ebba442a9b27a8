"""An RL ``rl.reward`` of another task than the training data is refused up front: by ``train --dry-run`` (exit 2)
and by a sweep's checks (``--validate-only`` and a real sweep) before any trial or shared starting point, as the
run refuses it at its start (``stages.rl.check_reward_tasks``). ``rl.reward=code`` on the arithmetic world passed
the dry run and ``--validate-only``; a sweep then trained its SFT starting point for minutes before every trial
failed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from klear_lab.cli import main
from klear_lab.cli_sweep import main as sweep_main
from klear_lab.config.compose import compose
from klear_lab.errors import ConfigError
from klear_lab.reward_checks import reward_task_problem
from klear_lab.stages.rl import check_reward_tasks

sys.path.insert(0, str(Path(__file__).resolve().parent / "sweep"))
from sweep_fixtures import write_spec  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
QUICK = ROOT / "experiments/quickstart"
CODE_ON_MATH = "rl.reward 'code' scores code tasks, but data.sources.0 (arith) holds math records"
MATH_ON_CODE = "rl.reward 'math_verify' scores math tasks, but data.sources.0 (code) holds code records"


def _one_line(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize(("experiment", "reward", "said", "hint"), [
    ("rl.yaml", "code", CODE_ON_MATH, "rl.reward=math_verify"),
    ("code_rl.yaml", "math_verify", MATH_ON_CODE, "rl.reward=code"),
])
def test_the_dry_run_refuses_a_reward_of_another_task(experiment, reward, said, hint, tmp_path, capsys):
    runs = tmp_path / "runs"
    assert main(["train", str(QUICK / experiment), f"rl.reward={reward}", f"run.out_dir={runs}", "--dry-run"]) == 2
    err = _one_line(capsys.readouterr().err)
    assert f"rl.reward tasks: NOT SUPPORTED: {said}" in err and hint in err, err
    assert not runs.exists()


def test_the_dry_run_passes_the_reward_of_the_datas_task(capsys):
    assert main(["train", str(QUICK / "rl.yaml"), "--dry-run"]) == 0, capsys.readouterr().err
    assert "rl.reward tasks" not in capsys.readouterr().out


def test_the_dry_run_reads_no_file_to_know_and_names_a_declared_task(tmp_path, capsys):
    """A ``task: auto`` file is not read by the dry run: unknown, it passes (the run checks its records); a file
    that declares ``task: code`` is refused under a math reward, named with its path."""
    data = tmp_path / "code.jsonl"
    data.write_text(json.dumps({"prompt": "write f", "answer": "def f(): pass", "task": "code"}) + "\n")
    source = f"{{name: file, path: {data}, format: records"
    assert main(["train", str(QUICK / "rl.yaml"), f"data.sources=[{source}}}]", "--dry-run"]) == 0
    capsys.readouterr()
    assert main(["train", str(QUICK / "rl.yaml"), f"data.sources=[{source}, task: code}}]", "--dry-run"]) == 2
    err = _one_line(capsys.readouterr().err)
    assert f"rl.reward 'math_verify' scores math tasks, but data.sources.0 (file {data}) holds code records" in err


def test_an_sft_run_is_not_held_to_rl_reward():
    cfg = compose(QUICK / "sft.yaml")  # a saved config may carry an rl.reward (typed, it is refused)
    cfg["rl"]["reward"]["name"] = "code"
    assert reward_task_problem(cfg) is None


@pytest.mark.parametrize(("mix", "refused"), [
    ("{name: top_k, k: 1, budget: 64}", False),  # the best-ranked source only: arith
    ("{name: weighted, weights: {arith: 1.0, code: 0.0}, budget: 64}", False),
    ("{name: all}", True),
])
def test_only_the_sources_the_mix_draws_from_count(mix, refused):
    """The run checks the records the mix drew: a code source the mix leaves out does not fail a math reward."""
    from klear_lab.builders import build_train_records

    sources = ("data.sources=[{name: arith, n_prompts: 64, quality_rank: 1}, "
               "{name: code, n_prompts: 64, quality_rank: 2}]")
    cfg = compose(QUICK / "rl.yaml", [sources, f"data.mix={mix}"])
    problem = reward_task_problem(cfg)
    records, _ = build_train_records(cfg)
    if refused:
        assert problem is not None and "data.sources.1 (code) holds code records" in problem, problem
        assert "data.sources.0" not in problem
        with pytest.raises(ConfigError):  # the run refuses it too
            check_reward_tasks("math_verify", records)
    else:
        assert problem is None, problem
        check_reward_tasks("math_verify", records)


def _rl_spec(tmp_path: Path, axes: dict, **extra) -> Path:
    return write_spec(tmp_path, experiment=str(QUICK / "rl.yaml"), axes=axes, **extra)


def test_a_sweep_axis_setting_rl_reward_code_on_the_math_world_stops_before_any_trial(tmp_path, capsys):
    from klear_lab.reward_checks import reward_unavailable

    spec = _rl_spec(tmp_path, {"rl.reward.name": ["math_verify", "code"]})
    # a real sweep without bubblewrap stops earlier, on the code reward it cannot run here
    runs = [["--validate-only"]] + ([[]] if reward_unavailable({"name": "code"}) is None else [])
    for args in runs:
        assert sweep_main(["sweep", str(spec), *args]) == 2
        err = _one_line(capsys.readouterr().err)
        assert f"{spec}: in arm reward=code, {CODE_ON_MATH}" in err, err
        assert "arm reward=math_verify" not in err and "no trial was started" in err
    assert not (tmp_path / "out").exists()  # no study, no starting point trained


def test_a_sweep_axis_over_the_data_names_the_arm_that_reads_the_other_task(tmp_path, capsys):
    spec = _rl_spec(tmp_path, {"data.sources": {"values": [[{"name": "arith", "n_prompts": 64}],
                                                           [{"name": "code", "n_prompts": 64}]],
                                                "labels": ["arith", "code"]}})
    for args in (["--validate-only"], []):
        assert sweep_main(["sweep", str(spec), *args]) == 2
        err = _one_line(capsys.readouterr().err)
        assert f"in arm sources=code, {MATH_ON_CODE}" in err, err
    assert not (tmp_path / "out").exists()


def test_tpe_and_an_override_name_the_trials_and_the_override(tmp_path, capsys):
    spec = _rl_spec(tmp_path, {"optim.lr": {"low": 3e-5, "high": 1e-4}}, sampler="tpe", n_trials=2,
                    overrides=["data.eval_sources.0.n_prompts=20", "rl.reward=code"])
    assert sweep_main(["sweep", str(spec), "--validate-only"]) == 2
    err = _one_line(capsys.readouterr().err)
    assert f"in every trial (overrides: rl.reward=code), {CODE_ON_MATH}" in err, err  # not the held-out size


def test_a_matching_reward_validates_and_a_declared_world_is_not_generated(tmp_path, monkeypatch, capsys):
    """The embedded worlds declare their task (``ArithSource.task``): three arms of three data mixes over one
    source validate without generating its train split for the check."""
    from klear_lab.data.sources.arith import ArithSource

    calls = []
    real = ArithSource.records
    monkeypatch.setattr(ArithSource, "records", lambda self, seed, split: calls.append(split)
                        or real(self, seed, split))
    spec = _rl_spec(tmp_path, {"data.mix.budget": [64, 128, 256]},
                    overrides=["data.mix={name: top_k, k: 1}"])
    assert sweep_main(["sweep", str(spec), "--validate-only"]) == 0, capsys.readouterr().err
    assert "3 arm(s) x 1 seed(s) = 3 trials" in capsys.readouterr().out
    assert calls.count("train") == 0, calls


def test_a_task_auto_file_is_read_once_across_arms(tmp_path, monkeypatch, capsys):
    """A file of ``task: auto`` is read once for the sweep (its rows, then its tasks from the same read)."""
    import klear_lab.data.sources.file as file_source

    data = tmp_path / "code.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"Write f {i}", "answer": "def f(x): return x",
                                        "tests": [{"stdin": "1", "stdout": "1"}]}) + "\n" for i in range(8)))
    reads = []
    real = file_source.read_rows
    monkeypatch.setattr(file_source, "read_rows", lambda path, *split: reads.append(path) or real(path, *split))
    spec = _rl_spec(tmp_path, {"data.mix.budget": [4, 8]},
                    overrides=[f"data.sources=[{{name: file, path: {data}}}]",
                               "data.mix={name: top_k, k: 1}"])
    assert sweep_main(["sweep", str(spec), "--validate-only"]) == 2
    assert "data.sources.0 (file " in _one_line(capsys.readouterr().err)  # code rows, a math reward
    assert reads.count(str(data)) == 1, reads


MIXES = """
from dataclasses import dataclass
from klear_lab.registry import DATA_MIX

@DATA_MIX.register("rtc_first_only")
@dataclass(frozen=True)
class FirstOnly:
    \"\"\"A mix without ``plan``: the first source's records.\"\"\"
    def __call__(self, pools, ranks, seed):
        return list(next(iter(pools.values())))

@DATA_MIX.register("rtc_seeded_plan")
@dataclass(frozen=True)
class SeededPlan:
    \"\"\"A mix whose ``plan`` takes a seed too: the first source.\"\"\"
    def plan(self, sizes, ranks, seed):
        return {next(iter(sizes)): 1}
    def __call__(self, pools, ranks, seed):
        return list(pools[next(iter(self.plan({k: len(v) for k, v in pools.items()}, ranks, seed)))])
"""
TWO_WORLDS = ("data.sources=[{name: arith, n_prompts: 64, levels: [1], level_weights: [1]}, "
              "{name: code, n_prompts: 64, levels: [3], level_weights: [1]}]")


@pytest.fixture(scope="module")
def plugin_mixes(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("mixes") / "rtc_mixes.py"  # one file per process: its names register once
    path.write_text(MIXES)
    return path


@pytest.mark.parametrize("overrides", [
    ["data.mix={name: rtc_first_only}"],  # no plan: which sources it draws is the mix's
    ["data.mix={name: rtc_seeded_plan}"],  # a plan of another signature is not called
    ["data.mix={name: all}", "data.filter={name: band, min_level: 3}"],  # the filter empties arith
    ["data.mix={name: top_k, k: 1, budget: 64}"],  # a top_k tie the run refuses for what it is
])
def test_where_the_sources_drawn_are_not_known_a_mixed_run_is_left_to_the_run(overrides, plugin_mixes, capsys):
    """A plugin mix (its ``plan`` may take other arguments), a difficulty filter, a plan that refuses: the
    records the run draws may all be of the reward's task, so only the run can tell; the dry run does not
    fail or refuse (it crashed with a TypeError on the seeded plan, and refused the rest)."""
    reward = "code" if "data.filter={name: band, min_level: 3}" in overrides else "math_verify"
    args = [f"plugins=[{plugin_mixes}]", TWO_WORLDS, *overrides, f"rl.reward={reward}"]
    assert reward_task_problem(compose(QUICK / "rl.yaml", args)) is None
    tie = "data.mix={name: top_k, k: 1, budget: 64}" in overrides  # refused by the dry run as the mix's problem
    assert main(["train", str(QUICK / "rl.yaml"), *args, "--dry-run"]) == (2 if tie else 0)
    err = " ".join(capsys.readouterr().err.split())
    assert "rl.reward tasks: NOT SUPPORTED" not in err
    assert ("data mix: NOT SUPPORTED: data.mix 'top_k': k=1 would keep some and drop others" in err) == tie, err


def test_where_the_sources_drawn_are_not_known_a_run_of_only_other_tasks_is_refused(plugin_mixes):
    cfg = compose(QUICK / "rl.yaml", [f"plugins=[{plugin_mixes}]", "data.mix={name: rtc_first_only}",
                                      "data.sources=[{name: arith, n_prompts: 64}, {name: arith_r1, n_prompts: 64}]",
                                      "rl.reward=code"])
    problem = reward_task_problem(cfg)
    assert problem is not None and "data.sources.0 (arith) holds math records and data.sources.1 (arith_r1)" in problem
