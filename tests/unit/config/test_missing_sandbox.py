"""A machine without bubblewrap: a run that would execute model-written code (a ``code`` RL reward, or held-out
code records graded by ``eval.code_reward``) is refused before anything is built or written (exit 2), its dry
run marks it NOT AVAILABLE HERE and a sweep refuses to start; a math-only run needs no sandbox.

A reviewer hid ``bwrap`` from ``klear-lab train experiments/quickstart/code_rl.yaml model.init_from=null``: the
model loaded, rollouts were generated, and the first reward call raised RuntimeError (exit 1), leaving a run
directory recorded as failed; ``--dry-run`` and a sweep's ``--validate-only`` said nothing.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from klear_lab.cli import main
from klear_lab.config.compose import compose
from klear_lab.rewards import sandbox, sandbox_check
from klear_lab.rewards.code_exec import CodeExecReward

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sweep"))
from sweep_fixtures import write_spec  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
QUICK = ROOT / "experiments/quickstart"
MISSING = "bubblewrap (bwrap) is required to run untrusted code and was not found on PATH"
HINT = "apt-get install -y bubblewrap"


@pytest.fixture
def no_bwrap(monkeypatch, tmp_path):
    """The sandbox's own lookup (``PATH``, then ``/usr/bin`` and ``/bin``) searches a directory without bwrap."""
    empty = tmp_path / "no-bwrap-bin"
    empty.mkdir()
    monkeypatch.setattr(sandbox, "_search_path", lambda: str(empty))


NO_USERNS = ("bwrap: No permissions to creating new namespace, likely because the kernel does not allow "
             "non-privilege user namespaces")


@pytest.fixture
def broken_bwrap(monkeypatch, tmp_path):
    """A ``bwrap`` that is installed but cannot make namespaces (Ubuntu 24.04's AppArmor rule, a container's
    seccomp profile): it fails as that one does."""
    bin_dir = tmp_path / "broken-bwrap-bin"
    bin_dir.mkdir()
    fake = bin_dir / "bwrap"
    fake.write_text(f"#!/bin/sh\necho '{NO_USERNS}' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(sandbox, "_search_path", lambda: str(bin_dir))
    return fake


def test_a_bwrap_that_cannot_start_a_sandbox_is_found_before_the_run(broken_bwrap, tmp_path, capsys):
    """It passed the path lookup: the run loaded its model, made rollouts and failed at the first reward call."""
    why = CodeExecReward().unavailable()
    assert why is not None and why.startswith(f"bwrap ({broken_bwrap}) is installed but cannot start a sandbox here")
    assert NO_USERNS in why and "kernel.apparmor_restrict_unprivileged_userns" in why
    runs = tmp_path / "runs"
    assert main(["train", str(QUICK / "code_rl.yaml"), "model.init_from=null", "rl.steps=1",
                 f"run.out_dir={runs}"]) == 2
    err = _one_line(capsys.readouterr().err)
    assert "rl.reward 'code' (scores every rollout)" in err and NO_USERNS in err and "Nothing was run" in err, err
    assert not runs.exists()


def _fake_bwrap(bin_dir: Path, body: str) -> Path:
    """A ``bwrap`` that runs ``body`` (sh) after counting its start in ``bin_dir/starts``."""
    bin_dir.mkdir()
    fake = bin_dir / "bwrap"
    fake.write_text(f"#!/bin/sh\necho x >> '{bin_dir / 'starts'}'\n{body}\n")
    fake.chmod(0o755)
    return fake


def test_a_failed_start_is_found_once_per_process(monkeypatch, tmp_path):
    fake = _fake_bwrap(tmp_path / "bin", f"echo '{NO_USERNS}' >&2; exit 1")
    monkeypatch.setattr(sandbox, "_search_path", lambda: str(fake.parent))
    first = sandbox_check.sandbox_unavailable()
    assert first is not None and NO_USERNS in first and "apparmor" in first
    assert sandbox_check.sandbox_unavailable() == first
    assert (fake.parent / "starts").read_text() == "x\n"  # one sandbox started, not one per check


def test_a_start_that_only_took_too_long_is_neither_refused_nor_remembered(monkeypatch, tmp_path):
    """A loaded host (a sweep's parallel trials): refusing every later run in the process would be wrong."""
    fake = _fake_bwrap(tmp_path / "bin", "sleep 3")
    monkeypatch.setattr(sandbox, "_search_path", lambda: str(fake.parent))
    monkeypatch.setattr(sandbox, "START_LIMIT_S", 0.3)
    assert sandbox_check.sandbox_unavailable() is None
    assert sandbox_check.sandbox_unavailable() is None
    assert (fake.parent / "starts").read_text() == "x\nx\n"  # tried again


def test_an_error_without_namespaces_in_it_gets_no_namespace_hint(monkeypatch, tmp_path):
    fake = _fake_bwrap(tmp_path / "bin", "echo 'bwrap: Unknown option --die-with-parent' >&2; exit 1")
    monkeypatch.setattr(sandbox, "_search_path", lambda: str(fake.parent))
    why = sandbox_check.sandbox_unavailable()
    assert why is not None and "Unknown option --die-with-parent" in why and "apparmor" not in why


def _one_line(text: str) -> str:
    return " ".join(text.split())


def test_the_code_reward_says_what_is_missing_and_how_to_get_it(no_bwrap):
    why = CodeExecReward().unavailable()
    assert why is not None and MISSING in why and HINT in why


def test_the_code_reward_is_available_where_bwrap_is():
    if sandbox.shutil.which("bwrap", path=sandbox._search_path()) is None:
        pytest.skip("this machine has no bwrap")
    try:
        sandbox.current_isolation()
    except (RuntimeError, OSError):
        pytest.skip("this process cannot isolate a sandbox")
    assert CodeExecReward().unavailable() is None


TINY_EVAL = ["data.eval_sources.0.n_prompts=2", "eval.max_new_tokens=8", "trainer.checkpoint=false"]
TINY_CODE_SFT = """base: {base}
data:
  sources: [{{name: code_r1, n_prompts: 16, levels: [1], level_weights: [1.0]}}]
  eval_sources: [{{name: code, levels: [1], level_weights: [1.0], n_prompts: 2}}]
sft: {{max_steps: 1}}
eval: {{max_new_tokens: 8}}
trainer: {{checkpoint: false}}
"""


@pytest.mark.parametrize(("experiment", "overrides"), [
    ("code_sft.yaml", ["sft.max_steps=1", "data.sources.0.n_prompts=16", *TINY_EVAL]),
    ("code_rl.yaml", ["model.init_from=null", "rl.steps=1", "data.sources.0.n_prompts=8", "rl.max_new_tokens=8",
                      *TINY_EVAL]),  # the reviewer's command
    ("code_rl.yaml", ["model.init_from=PARENT", "rl.steps=1", *TINY_EVAL]),  # not even its parent is trained
])
def test_a_code_run_is_refused_with_exit_2_before_a_run_directory_exists(no_bwrap, tmp_path, capsys, experiment,
                                                                         overrides):
    parent = tmp_path / "parent.yaml"
    parent.write_text(TINY_CODE_SFT.format(base=QUICK / "code_sft.yaml"))
    runs = tmp_path / "runs"
    args = [o.replace("PARENT", str(parent)) for o in overrides]
    assert main(["train", str(QUICK / experiment), *args, f"run.out_dir={runs}"]) == 2
    err = _one_line(capsys.readouterr().err)
    assert MISSING in err and HINT in err and "Nothing was run or written" in err, err
    assert "eval.code_reward 'code' (grades the code records of data.eval_sources)" in err
    assert ("rl.reward 'code' (scores every rollout)" in err) == (experiment == "code_rl.yaml")
    assert not runs.exists()  # no run directory, no parent's


def test_an_eval_of_code_records_is_refused_before_it_loads_the_model(no_bwrap, tmp_path, capsys):
    runs = tmp_path / "runs"
    assert main(["eval", str(QUICK / "code_sft.yaml"), f"model.name_or_path={tmp_path / 'no-model'}",
                 f"run.out_dir={runs}"]) == 2
    err = _one_line(capsys.readouterr().err)
    assert "eval.code_reward 'code'" in err and MISSING in err, err
    assert not runs.exists()


def test_the_dry_run_marks_the_code_reward_not_available_here(no_bwrap, capsys):
    assert main(["train", str(QUICK / "code_sft.yaml"), "--dry-run"]) == 0  # the config may be meant for another
    out = capsys.readouterr().out
    assert "eval.code_reward" in out and "NOT AVAILABLE HERE: 'code' (grades the code records" in out, out
    assert "bubblewrap (bwrap) is required" in out and HINT in _one_line(out.replace("│", " "))


def test_the_dry_run_of_code_rl_marks_both_rewards(no_bwrap, tmp_path):
    from klear_lab.dry_run import plan_rows

    rows = dict(plan_rows(compose(QUICK / "code_rl.yaml", ["model.init_from=null"]), 2_000_000))
    assert rows["rl.reward"] == (f"NOT AVAILABLE HERE: 'code' (scores every rollout): {MISSING}; install it with "
                                 f"`{HINT}` (scripts/bootstrap.sh does). Refusing to run unisolated.")
    assert rows["eval.code_reward"].startswith("NOT AVAILABLE HERE: 'code' (grades the code records")


@pytest.mark.parametrize("experiment", ["sft.yaml", "rl.yaml"])
def test_a_math_run_needs_no_sandbox(no_bwrap, experiment):
    """Both eval verifiers are always built, but eval.code_reward only grades code records: none here."""
    from klear_lab.dry_run import plan_rows
    from klear_lab.reward_checks import rewards_problem, unavailable_rewards

    cfg = compose(QUICK / experiment, ["model.init_from=null"] if experiment == "rl.yaml" else [])
    assert unavailable_rewards(cfg) == [] and unavailable_rewards(cfg, read=False) == []
    assert rewards_problem(cfg) is None
    assert not [k for k, v in plan_rows(cfg, 2_000_000) if "NOT AVAILABLE HERE" in v]


def test_a_math_sft_run_runs_without_bwrap(no_bwrap, tiny_sft_overrides, tmp_path, capsys):
    """The quickstart SFT with its default (arithmetic) evaluation trains and evaluates without a sandbox."""
    assert main(["train", str(QUICK / "sft.yaml"), *tiny_sft_overrides]) == 0, capsys.readouterr().err
    (run,) = (tmp_path / "runs").iterdir()
    assert json.loads((run / "run.json").read_text())["status"] == "completed"


def test_an_eval_file_is_judged_by_its_tasks(no_bwrap, tmp_path):
    """A file of ``task: auto``: the run reads it to know (code rows: refused; math rows: not); the dry run reads
    no data and says the code verifier may be needed; a declared ``task: math`` is not read at all."""
    code = tmp_path / "code.jsonl"
    code.write_text(json.dumps({"prompt": "p", "answer": "", "task": "code",
                                "tests": [{"input": [1], "output": 1}]}) + "\n")
    math = tmp_path / "math.jsonl"
    math.write_text(json.dumps({"prompt": "1+1=", "answer": "2"}) + "\n")
    from klear_lab.reward_checks import unavailable_rewards

    def cfg(path, task="auto"):
        return compose(QUICK / "sft.yaml", [f"data.eval_sources=[{{name: file, path: {path}, format: records, "
                                            f"task: {task}}}]"])

    assert [k for k, _ in unavailable_rewards(cfg(code))] == ["eval.code_reward"]
    assert unavailable_rewards(cfg(math)) == []
    ((key, why),) = unavailable_rewards(cfg(math), read=False)
    assert key == "eval.code_reward" and "would grade any code records of data.eval_sources.0: task auto" in why
    assert unavailable_rewards(cfg(tmp_path / "absent.jsonl", "math"), read=False) == []
    assert [k for k, _ in unavailable_rewards(cfg(tmp_path / "absent.jsonl", "code"))] == ["eval.code_reward"]


def test_a_sweep_whose_trials_grade_code_is_refused_at_start_and_noted_by_validation(no_bwrap, tmp_path, capsys):
    """As for data this machine lacks: ``--validate-only`` checks a spec meant for another machine, and says
    so; the sweep itself refuses to start, before its study exists."""
    from klear_lab.cli_sweep import main as sweep_main

    spec = write_spec(tmp_path, overrides=["data.eval_sources=[{name: code, n_prompts: 4}]"])
    assert sweep_main(["sweep", str(spec), "--validate-only"]) == 0
    out = _one_line(capsys.readouterr().out)
    assert "note: rewards this machine cannot run, so trials here would fail: eval.code_reward 'code'" in out, out
    assert MISSING in out and HINT in out
    assert sweep_main(["sweep", str(spec)]) == 2
    err = _one_line(capsys.readouterr().err)
    assert f"{spec}: the trials would call rewards this machine cannot run: eval.code_reward 'code'" in err, err
    assert not (tmp_path / "out" / "toy" / "study.db").exists()  # refused before the study


def test_a_sweep_axis_onto_the_code_reward_is_named(no_bwrap, tmp_path, capsys):
    from klear_lab.cli_sweep import main as sweep_main

    spec = write_spec(tmp_path, overrides=["run.kind=rl"], axes={"rl.reward.name": ["math_verify", "code"]})
    assert sweep_main(["sweep", str(spec)]) == 2
    err = _one_line(capsys.readouterr().err)
    assert "rl.reward 'code' (scores every rollout)" in err and "eval.code_reward" not in err, err


def test_a_math_sweep_validates_without_bwrap(no_bwrap, tmp_path, capsys):
    from klear_lab.cli_sweep import main as sweep_main

    assert sweep_main(["sweep", str(write_spec(tmp_path)), "--validate-only"]) == 0, capsys.readouterr().err
    assert ": OK:" in capsys.readouterr().out


def test_a_starting_point_that_grades_code_is_found_by_the_dry_run_and_the_sweep(no_bwrap, tmp_path, capsys):
    """A math RL run whose ``model.init_from`` is the code SFT: the run trains that SFT first, which grades code
    records. Its dry run and its sweep's checks said nothing; the SFT's own start was the first to refuse."""
    from klear_lab.cli_sweep import main as sweep_main
    from klear_lab.dry_run import plan_rows
    from klear_lab.reward_checks import parent_unavailable_rewards, unavailable_rewards

    overrides = [f"model.init_from={QUICK / 'code_sft.yaml'}", f"run.out_dir={tmp_path / 'runs'}"]
    cfg = compose(QUICK / "rl.yaml", overrides)
    assert unavailable_rewards(cfg) == []  # the RL run itself grades math only
    key = f"model.init_from {compose(QUICK / 'code_sft.yaml')['run']['experiment']}: eval.code_reward"
    assert [k for k, _ in parent_unavailable_rewards(cfg)] == [key]
    assert dict(plan_rows(cfg, 2_000_000))[key].startswith(
        "NOT AVAILABLE HERE: 'code' (grades the code records")
    assert parent_unavailable_rewards(compose(QUICK / "rl.yaml")) == []  # the math SFT grades no code

    spec = write_spec(tmp_path)
    (tmp_path / "exp.yaml").write_text(f"base: {QUICK / 'rl.yaml'}\nmodel: {{init_from: {QUICK / 'code_sft.yaml'}}}\n")
    assert sweep_main(["sweep", str(spec)]) == 2
    err = _one_line(capsys.readouterr().err)
    assert f"would call rewards this machine cannot run: {key} 'code'" in err, err
    assert not (tmp_path / "out" / "toy" / "study.db").exists()
