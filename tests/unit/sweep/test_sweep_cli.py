"""``klear-lab sweep|compare|dashboard`` argument handling, exit codes and the dashboard server."""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time
import urllib.request

import optuna
import pytest
import yaml
from optuna.trial import TrialState
from sweep_fixtures import REPO, write_spec

from klear_lab.cli_sweep import main
from klear_lab.errors import ConfigError
from klear_lab.sweep.launch import freeze_spec
from klear_lab.sweep.locate import locate
from klear_lab.sweep.spec import load_spec
from klear_lab.sweep.storage import default_storage_url, open_study


def test_validate_only_and_bad_spec_exit_codes(tmp_path, capsys):
    spec = write_spec(tmp_path, seeds=(0, 1))
    assert main(["sweep", str(spec), "--validate-only"]) == 0
    assert "3 arm(s) x 2 seed(s) = 6 trials" in capsys.readouterr().out
    assert main(["sweep", str(spec), "optim.nope=1", "--validate-only"]) == 2
    assert "optim.nope" in capsys.readouterr().err
    assert main(["sweep", str(spec), "--workers", "0"]) == 2
    assert not (tmp_path / "out" / "toy" / "study.db").exists()  # nothing started


def test_a_sweep_builds_its_grid_and_counts_its_trials_once(tmp_path, capsys, monkeypatch):
    """``run_sweep`` built the grid's arms for the name check and again in ``check_spec``, and computed arms x
    seeds for its trial count and again in ``trial_plan``; each is computed once and passed on."""
    from klear_lab.sweep import grid, launch

    calls = {"grid_arms": 0, "trial_count": 0}

    def counted(name, real):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return real(*args, **kwargs)
        return wrapper

    real = grid.grid_arms
    for module in [m for n, m in sys.modules.items() if n.startswith("klear_lab.sweep")]:
        if getattr(module, "grid_arms", None) is real:  # each module that imported it
            monkeypatch.setattr(module, "grid_arms", counted("grid_arms", real))
    monkeypatch.setattr(launch, "trial_count", counted("trial_count", launch.trial_count))
    assert main(["sweep", str(write_spec(tmp_path, seeds=(0, 1))), "--validate-only"]) == 0
    assert "3 arm(s) x 2 seed(s) = 6 trials" in capsys.readouterr().out
    assert calls == {"grid_arms": 1, "trial_count": 1}


def test_validate_only_says_how_a_sampled_sweep_uses_its_seeds(tmp_path, capsys):
    """tpe/random: n_trials trials, trial N on seeds[N % len(seeds)]; "5 arm(s) x 2 seed(s) = 5 trials" was said."""
    spec = write_spec(tmp_path, seeds=(0, 1), sampler="tpe", n_trials=5)
    assert main(["sweep", str(spec), "--validate-only"]) == 0
    out = capsys.readouterr().out
    assert "arm(s)" not in out
    assert "OK: 5 trials, sampler tpe (each draws its own axis values; seeds in turn by trial number: " \
        "3 on seed 0, 2 on seed 1)" in out


def test_overrides_may_follow_the_options(tmp_path, capsys):
    spec = write_spec(tmp_path)
    assert main(["sweep", str(spec), "--validate-only", "optim.weight_decay=0.5"]) == 0
    assert main(["sweep", str(spec), "--workers", "2", "--validate-only", "optim.nope=1"]) == 2
    assert "optim.nope" in capsys.readouterr().err
    for stray in (["stray"], ["--wrokers", "2"]):
        with pytest.raises(SystemExit) as exit_:
            main(["sweep", str(spec), "--validate-only", *stray])
        assert exit_.value.code == 2 and f"unrecognized arguments: {' '.join(stray)}" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # compare takes no overrides
        main(["compare", str(spec), "a=1"])


def test_overrides_before_and_after_options_keep_their_order():
    from klear_lab.cli_args import parse_args
    from klear_lab.cli_sweep import add_sweep_commands

    parser = argparse.ArgumentParser(prog="klear-lab")
    add_sweep_commands(parser.add_subparsers(dest="command", required=True))
    args = parse_args(parser, ["sweep", "s.yaml", "a=1", "--workers", "2", "b=2", "--", "c=3"])
    assert args.overrides == ["a=1", "b=2", "c=3"] and args.workers == 2


def test_wandb_export_writes_config_and_runs_nothing(tmp_path, capsys):
    spec = write_spec(tmp_path)
    assert main(["sweep", str(spec), "--wandb-export"]) == 0
    out = tmp_path / "out" / "toy" / "wandb_sweep.yaml"
    assert str(out) in capsys.readouterr().out
    assert yaml.safe_load(out.read_text())["method"] == "grid"
    assert not (tmp_path / "out" / "toy" / "study.db").exists()


def test_locate_from_dir_or_spec(tmp_path):
    spec_path = write_spec(tmp_path)
    spec = load_spec(spec_path)
    url = default_storage_url(spec)
    freeze_spec(spec, url)
    for target in (spec.sweep_dir, spec_path):
        found, found_url = locate(target)
        assert found.name == "toy" and found_url == url and found.sweep_dir == spec.sweep_dir
    frozen = yaml.safe_load((spec.sweep_dir / "spec.yaml").read_text())
    assert frozen["experiment"] == str((tmp_path / "exp.yaml").resolve()) and frozen["storage"] is None  # default:
    assert json.loads((spec.sweep_dir / "sweep.json").read_text())["storage"] == url  # the directory's own


def test_a_file_of_the_sweep_directory_is_sent_to_the_directory(tmp_path):
    """``compare SWEEP_DIR/study.db`` was read as a spec: "not UTF-8 text (byte 0xfb...)"."""
    spec = _study(tmp_path)
    with pytest.raises(ConfigError, match=f"study.db: a file of the sweep directory {spec.sweep_dir}; give that"):
        locate(spec.sweep_dir / "study.db")
    assert locate(spec.sweep_dir / "spec.yaml")[0].name == "toy"  # the frozen spec is a spec file
    kept_inside = spec.sweep_dir / "toy.yaml"  # a spec kept in its own sweep directory (a review) is one too
    kept_inside.write_text((spec.sweep_dir / "spec.yaml").read_text())
    assert locate(kept_inside)[0].name == "toy"


def _study(tmp_path):
    """A sweep's spec with its study created (what the dashboard serves)."""
    spec = load_spec(write_spec(tmp_path))
    url = default_storage_url(spec)
    freeze_spec(spec, url)
    open_study(spec, url, create=True)
    return spec


def test_dashboard_serves_the_study(tmp_path):
    spec = _study(tmp_path)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "klear_lab.cli_sweep", "dashboard", str(spec.sweep_dir),
                             "--port", str(port)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline, body = time.time() + 60, None
        while body is None and time.time() < deadline:
            try:
                body = urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies", timeout=2).read()
            except OSError:
                assert proc.poll() is None, proc.stdout.read().decode()
                time.sleep(0.3)
        assert body is not None
        assert [s["study_name"] for s in json.loads(body)["study_summaries"]] == ["toy"]
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_dashboard_on_a_port_it_cannot_listen_on_names_it(tmp_path, capsys):
    """A second dashboard on the port, a port out of range, a host that does not resolve: tracebacks before."""
    spec = _study(tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["dashboard", str(spec.sweep_dir), "--port", str(port)]) == 2
        assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in capsys.readouterr().err
    assert main(["dashboard", str(spec.sweep_dir), "--port", "99999"]) == 2
    assert "--port 99999: not a port (0-65535)" in capsys.readouterr().err
    assert main(["dashboard", str(spec.sweep_dir), "--host", "no-such-host.invalid"]) == 2
    assert "cannot listen on no-such-host.invalid:8080" in capsys.readouterr().err


def test_compare_and_dashboard_of_a_sweep_never_run_create_nothing(tmp_path, capsys, monkeypatch):
    """Both said "no study" but left ``sweep_runs/NAME/study.db`` and its lock behind in the working directory."""
    monkeypatch.chdir(tmp_path)
    spec = write_spec(tmp_path, out_dir="sweep_runs")
    before = sorted(tmp_path.rglob("*"))
    for command in ("compare", "dashboard"):
        assert main([command, str(spec)]) == 2
        assert f"no study 'toy' in sqlite:///{tmp_path / 'sweep_runs/toy/study.db'}; start it with `klear-lab " \
               f"sweep {spec}` first" in capsys.readouterr().err
    assert sorted(tmp_path.rglob("*")) == before


def test_the_command_that_starts_a_sweep_keeps_its_name_and_out_dir(tmp_path):
    """"Start it with `klear-lab sweep SPEC`" (a --join or compare that found no study) dropped the --name
    and --out-dir the sweep was given: that command starts or joins another study."""
    path = write_spec(tmp_path)
    assert load_spec(path).launch_command() == f"klear-lab sweep {path}"
    assert load_spec(path, name="b").launch_command() == f"klear-lab sweep {path} --name b"
    moved = load_spec(path)
    moved.out_dir = tmp_path / "other dir"
    assert moved.launch_command() == f"klear-lab sweep {path} --out-dir '{tmp_path / 'other dir'}'"


def test_trials_failed_on_a_config_error_are_not_sent_to_a_rerun(tmp_path):
    """The end of a sweep whose trials all refused their config said to rerun the same command to retry them."""
    from optuna.trial import TrialState

    from klear_lab.sweep.checks import check_spec
    from klear_lab.sweep.launch import _finish
    from klear_lab.sweep.queue import prepare_study
    from klear_lab.sweep.storage import StudyLock
    from klear_lab.sweep.trial import CONFIG_ERROR_ATTR

    spec = load_spec(write_spec(tmp_path))
    url = default_storage_url(spec)
    arms = check_spec(spec)
    study, _ = prepare_study(open_study(spec, url, create=True), spec, arms, StudyLock(url, spec.name))
    storage = study._storage
    for t in study.get_trials():
        storage.set_trial_state_values(t._trial_id, TrialState.RUNNING)
        storage.set_trial_user_attr(t._trial_id, "error", "ConfigError: trainer.strategy='fsdp': not for RL")
        storage.set_trial_user_attr(t._trial_id, CONFIG_ERROR_ATTR, True)
        storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
    lines: list[str] = []
    assert _finish(spec, study, arms, False, lines.append) == 1
    assert "rerun the same command" not in lines[-1]
    assert ("fix the config first: 3 trial(s) failed on a config or data error, or diverged: a rerun would likely "
            "repeat "
            "(trial 0: ConfigError: trainer.strategy='fsdp'") in lines[-1]


def test_data_this_machine_lacks_is_noted_by_validate_only_and_stops_a_sweep(tmp_path, capsys):
    """--validate-only said OK and the sweep trained nothing: every trial failed on the missing file, and the
    end of the sweep said to rerun to retry them."""
    missing = tmp_path / "nothere.jsonl"
    spec = write_spec(tmp_path, overrides=[f"data.sources=[{{name: file, path: {missing}, format: records}}]"])
    assert main(["sweep", str(spec), "--validate-only"]) == 0  # the spec may be meant for another machine
    out = capsys.readouterr().out
    assert f"note: data this machine cannot read, so trials here would fail: data.sources.0.path={missing}: no such " \
           "file" in out
    assert main(["sweep", str(spec)]) == 2
    assert f"the trials would read data this machine cannot: data.sources.0.path={missing}" in capsys.readouterr().err
    assert not (tmp_path / "out" / "toy" / "study.db").exists()  # refused before the study


def test_a_data_axis_that_replaces_a_missing_base_file_is_not_refused(tmp_path, capsys):
    """The base's file was checked even when every arm reads another: a sweep that would run was refused."""
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    for f in (a, b):
        f.write_text('{"prompt": "p", "answer": "1", "response": "r"}\n')
    base = f"data.sources=[{{name: file, path: {tmp_path / 'placeholder.jsonl'}, format: records}}]"
    spec = write_spec(tmp_path, overrides=[base], axes={"data.sources.0.path": [str(a), str(b)]})
    assert main(["sweep", str(spec), "--validate-only"]) == 0
    assert "note: data this machine cannot read" not in capsys.readouterr().out
    b.unlink()
    assert main(["sweep", str(spec), "--validate-only"]) == 0
    assert f"data.sources.0.path={b}: no such file" in capsys.readouterr().out


def test_compare_of_a_sweep_with_no_finished_trial_says_so_and_writes_nothing(tmp_path, capsys):
    """It wrote a table of dashes and exited 0 after a Ctrl-C before any trial finished (found by a probe)."""
    from klear_lab.sweep.checks import check_spec
    from klear_lab.sweep.queue import prepare_study
    from klear_lab.sweep.storage import StudyLock

    path = write_spec(tmp_path)
    spec = load_spec(path)
    url = default_storage_url(spec)
    prepare_study(open_study(spec, url, create=True), spec, check_spec(spec), StudyLock(url, spec.name))
    assert main(["compare", str(path)]) == 2
    assert "no finished trial to compare (3 waiting)" in capsys.readouterr().err
    assert not (spec.sweep_dir / "compare").exists()
    assert main(["compare", str(path), "--rescore", "eval.samples=2", "eval.temperature=0.6"]) == 2  # was exit 0
    assert "no finished trial to score (3 waiting)" in capsys.readouterr().err
    assert not list(spec.sweep_dir.glob("rescore-*"))  # an empty table was written


def test_validate_only_compares_with_an_existing_study(tmp_path, capsys):
    """It said OK for a spec that the run then refused ("started with a different base"): a rerun continues
    the study, so validation now refuses what the rerun would (found by a new-user walkthrough)."""
    from sweep_fixtures import write_spec as _write

    from klear_lab.sweep.checks import check_spec
    from klear_lab.sweep.queue import prepare_study
    from klear_lab.sweep.storage import StudyLock

    spec_path = _write(tmp_path, seeds=(0,))
    spec = load_spec(spec_path)
    url = default_storage_url(spec)
    study = open_study(spec, url, create=True)
    prepare_study(study, spec, check_spec(spec), StudyLock(url, spec.name))
    assert main(["sweep", str(spec_path), "--validate-only"]) == 0
    assert f"study {spec.name!r} exists (0 trial(s) complete)" in capsys.readouterr().out
    assert main(["sweep", str(spec_path), "--validate-only", "optim.weight_decay=0.5"]) == 2
    err = capsys.readouterr().err
    assert "was started with a different base (overrides: added ['optim.weight_decay=0.5'])" in err, err
    # what the config hash leaves out (threads, checkpoint spacing) may change between runs of a study
    assert main(["sweep", str(spec_path), "--validate-only", "trainer.num_threads=1",
                 "trainer.checkpoint_every=3"]) == 0, capsys.readouterr().err


def test_validate_only_says_a_widened_grid_continues_in_a_copy(tmp_path, capsys):
    """A seed added to a spec that ran: its run continues in study NAME@v2, or is refused while trials run;
    ``--validate-only`` said only "running this spec continues it" (and writes nothing)."""
    from sweep_fixtures import write_spec as _write

    from klear_lab.sweep.checks import check_spec
    from klear_lab.sweep.queue import prepare_study
    from klear_lab.sweep.storage import StudyLock

    spec_path = _write(tmp_path, seeds=(0,))
    spec = load_spec(spec_path)
    url = default_storage_url(spec)
    study = open_study(spec, url, create=True)
    prepare_study(study, spec, check_spec(spec), StudyLock(url, spec.name))
    study._storage.set_trial_state_values(study.trials[0]._trial_id, TrialState.RUNNING)
    spec_path = _write(tmp_path, seeds=(0, 1))
    assert main(["sweep", str(spec_path), "--validate-only"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert ("note: study 'toy' exists (0 trial(s) complete): the spec adds seeds [1], so running it continues the "
            "study in a copy, 'toy@v2', holding its trials; trial(s) [0] are marked running: it refuses while any of "
            "them is alive, and goes ahead once a killed sweep's heartbeats are 2 s old") in out, out
    assert optuna.get_all_study_names(url) == ["toy"]  # previewed, not made
    study._storage.set_trial_state_values(study.trials[0]._trial_id, TrialState.COMPLETE, values=[0.5])
    assert main(["sweep", str(_write(tmp_path, seeds=(0,))), "--validate-only"]) == 0
    assert "exists (1 trial(s) complete): running this spec continues it" in capsys.readouterr().out


def test_validate_only_refuses_a_tpe_axis_the_study_cannot_take(tmp_path, capsys):
    """A tpe/random study's categorical choices are fixed: the rerun refuses a changed axis, and
    ``--validate-only`` said OK for it."""
    from sweep_fixtures import write_spec as _write

    from klear_lab.sweep.checks import check_spec
    from klear_lab.sweep.claim import take_trial, trial_values
    from klear_lab.sweep.queue import prepare_study
    from klear_lab.sweep.storage import StudyLock

    spec_path = _write(tmp_path, sampler="tpe", n_trials=4)
    spec = load_spec(spec_path)
    url, lock = default_storage_url(spec), StudyLock(default_storage_url(spec), spec.name)
    study = open_study(spec, url, create=True)
    prepare_study(study, spec, check_spec(spec), lock)
    trial = optuna.trial.Trial(study, take_trial(study, spec, lock))
    trial_values(trial, spec)  # the categorical choices, as a worker records them
    study.tell(trial, 1.0)
    assert main(["sweep", str(spec_path), "--validate-only"]) == 0, capsys.readouterr().err
    widened = _write(tmp_path, sampler="tpe", n_trials=4, lrs=(0.001, 0.002, 0.003, 0.004))
    assert main(["sweep", str(widened), "--validate-only"]) == 2
    assert "optim.lr: study 'toy' was run with [0.001, 0.002, 0.003]" in capsys.readouterr().err


def test_a_tilde_in_sweep_directories_is_the_home_directory(tmp_path, monkeypatch):
    """``out_dir: ~/sweeps`` put the sweep in ``./~/sweeps`` (a run's ``run.out_dir`` expands ``~``); so did
    ``--out-dir=~/x`` (no shell expands it there), an SQLite storage under ``~`` and a quoted compare target."""
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    spec_path = write_spec(tmp_path, out_dir="~/sweeps", storage="sqlite:///~/dbs/toy.db")
    spec = load_spec(spec_path)
    url = default_storage_url(spec)
    assert spec.sweep_dir == home / "sweeps" / "toy" and url == f"sqlite:///{home / 'dbs' / 'toy.db'}"
    freeze_spec(spec, url)
    assert locate("~/sweeps/toy")[0].sweep_dir == spec.sweep_dir  # compare, dashboard and reproduce find it
    assert main(["sweep", str(spec_path), "--wandb-export", "--out-dir=~/elsewhere"]) == 0
    assert (home / "elsewhere" / "toy" / "wandb_sweep.yaml").is_file()
    assert not (tmp_path / "~").exists()
