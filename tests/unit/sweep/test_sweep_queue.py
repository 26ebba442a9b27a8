"""The study as a work queue (in-process, real SQLite + Optuna): enqueue once, claim once, resume."""

from __future__ import annotations

import threading
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from sweep_fixtures import write_spec

from klear_lab.errors import ConfigError
from klear_lab.sweep.checks import check_spec
from klear_lab.sweep.claim import claimed_trial, take_trial, trial_values
from klear_lab.sweep.queue import missing_points, prepare_study
from klear_lab.sweep.spec import load_spec
from klear_lab.sweep.storage import StudyLock, default_storage_url, open_study
from klear_lab.sweep.worker import threads_per_trial, trial_env


def _setup(tmp_path, **extra):
    spec = load_spec(write_spec(tmp_path, seeds=(0, 1), **extra))
    arms = check_spec(spec)
    url = default_storage_url(spec)
    study = open_study(spec, url, create=True)
    return spec, arms, url, study, StudyLock(url, spec.name)


def test_enqueue_is_idempotent(tmp_path):
    spec, arms, url, study, lock = _setup(tmp_path)
    assert prepare_study(study, spec, arms, lock) == (study, 6)
    assert prepare_study(study, spec, arms, lock) == (study, 0)
    waiting = study.get_trials(states=(TrialState.WAITING,))
    assert len(waiting) == 6
    assert {t.user_attrs["arm"] for t in waiting} == {"lr=0.001", "lr=0.002", "lr=0.003"}
    assert len({t.user_attrs["point"] for t in waiting}) == 6


def test_resume_refuses_a_different_base(tmp_path):
    spec, arms, url, study, lock = _setup(tmp_path)
    prepare_study(study, spec, arms, lock)
    spec.overrides = ["sft.max_steps=3"]
    with pytest.raises(ConfigError, match="different base"):
        prepare_study(study, spec, arms, lock)


def test_an_edited_experiment_is_refused_once_trials_finished(tmp_path):
    """The study recorded the experiment's path, not what it resolves to: after an edit to the experiment
    file (or a plugin's code) a rerun reported the finished trials of the old one as the sweep's result."""
    spec, arms, url, study, lock = _setup(tmp_path)
    prepare_study(study, spec, arms, lock)
    exp = tmp_path / "exp.yaml"
    exp.write_text(exp.read_text() + "sft: {max_steps: 3}\n")
    prepare_study(study, spec, arms, lock)  # nothing finished yet: a fix is welcome
    trial = optuna.trial.Trial(study, take_trial(study, spec, lock))
    study.tell(trial, 0.5)
    assert prepare_study(study, spec, arms, lock) == (study, 0)  # unchanged: resumes
    exp.write_text(exp.read_text().replace("max_steps: 3", "max_steps: 4"))
    with pytest.raises(ConfigError, match=r"different base \(config \(its hash was \w+, now \w+; changed since "
                                          r"trials finished: sft.max_steps: 3 -> 4; undo the change"):
        prepare_study(study, spec, arms, lock)
    from klear_lab.sweep.queue import BASE_ATTR, CONFIGS

    recorded = study.user_attrs[BASE_ATTR]  # a study recorded before it kept the configs
    study.set_user_attr(BASE_ATTR, {k: v for k, v in recorded.items() if k != CONFIGS})
    with pytest.raises(ConfigError, match=r"changed since trials finished: the experiment file, a file it builds"):
        prepare_study(study, spec, arms, lock)


def test_an_edited_plugin_is_named_as_the_change(tmp_path):
    """A comment-only edit of a plugin changes the hash (its code is hashed whole), and the refusal named no
    input: the study held only the hash."""
    plugin = tmp_path / "my_clip.py"
    plugin.write_text("# a plugin that registers nothing\n")
    spec, arms, url, study, lock = _setup(tmp_path, overrides=[f"plugins=[{plugin}]"])
    prepare_study(study, spec, arms, lock)
    study.tell(optuna.trial.Trial(study, take_trial(study, spec, lock)), 0.5)
    plugin.write_text("# a plugin that registers nothing, with a comment edited\n")
    with pytest.raises(ConfigError, match=rf"changed since trials finished: plugins: edited {plugin} \(a plugin's "
                                          r"code is hashed whole"):
        prepare_study(study, spec, arms, lock)
    from klear_lab.sweep.queue import BASE_ATTR, CONFIGS

    recorded = study.user_attrs[BASE_ATTR]  # a study recorded before it kept the plugins' paths: counted
    study.set_user_attr(BASE_ATTR, {**recorded, CONFIGS: {k: v for k, v in recorded[CONFIGS].items()
                                                          if k != "plugin_files"}})
    with pytest.raises(ConfigError, match=r"plugins: 1 plugin file\(s\) no longer used or edited, 1 new or edited"):
        prepare_study(study, spec, arms, lock)


def test_resume_refuses_another_objective_direction_or_pruner(tmp_path):
    """Optuna keeps a loaded study's direction: a flipped objective made TPE and the pruner work backwards."""
    spec, arms, url, study, lock = _setup(tmp_path)
    prepare_study(study, spec, arms, lock)
    for key, value, shown in [("direction", "minimize", r"direction \(the study's is maximize\)"),
                              ("metric", "val/loss", r"objective: the study has 'val/acc \(maximize\)'"),
                              ("pruner", "median", "pruner: the study has 'none', the spec 'median'")]:
        changed = load_spec(spec.path)
        setattr(changed, key, value)
        with pytest.raises(ConfigError, match=shown):
            prepare_study(open_study(changed, url, create=True), changed, arms, lock)


def test_a_joiner_must_share_the_base_but_not_the_experiment_path(tmp_path):
    """``--join`` compared nothing: a joiner without the main process's overrides trained other arms."""
    from klear_lab.sweep.queue import check_same_base

    spec, arms, url, study, lock = _setup(tmp_path)
    spec.overrides = ["sft.max_steps=3"]
    prepare_study(study, spec, arms, lock)
    joiner = load_spec(spec.path)  # the same spec, without the override
    with pytest.raises(ConfigError, match=r"overrides: removed \['sft.max_steps=3'\]\); join"):
        check_same_base(study, joiner, joining=True)
    joiner.overrides = ["sft.max_steps=3"]
    joiner.experiment = tmp_path / "elsewhere" / "exp.yaml"  # another machine's checkout
    check_same_base(study, joiner, joining=True)


def test_a_refused_rerun_leaves_the_frozen_spec_alone(tmp_path):
    """``spec.yaml`` was rewritten before the rerun was refused, and compare then read the refused spec."""
    from klear_lab.sweep.launch import freeze_spec, run_sweep

    spec, arms, url, study, lock = _setup(tmp_path, trial_start="fresh")
    prepare_study(study, spec, arms, lock)
    frozen = freeze_spec(spec, url).read_bytes()
    with pytest.raises(ConfigError, match="different base"):
        run_sweep(spec.path, ["sft.max_steps=3"], compare=False)
    assert (spec.sweep_dir / "spec.yaml").read_bytes() == frozen


def test_parallel_claims_take_each_point_once(tmp_path):
    spec, arms, url, study, lock = _setup(tmp_path)
    prepare_study(study, spec, arms, lock)
    claimed: list[tuple[str, int]] = []

    def worker():
        own = open_study(spec, url, create=False)
        own_lock = StudyLock(url, spec.name)
        while (tid := take_trial(own, spec, own_lock)) is not None:
            trial = optuna.trial.Trial(own, tid)
            values, seed, label = trial_values(trial, spec)
            claimed.append((label, seed))
            own.tell(trial, 100 * values["optim.lr"])

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(claimed) == sorted((a.label, s) for a in arms for s in (0, 1))
    assert len(study.trials) == 6 and missing_points(study, spec, arms) == []
    assert study.best_trial.params == {"optim.lr": 0.003, "run.seed": study.best_trial.params["run.seed"]}


def test_failed_points_are_reenqueued_on_resume(tmp_path):
    spec, arms, url, study, lock = _setup(tmp_path)
    prepare_study(study, spec, arms, lock)
    tid = take_trial(study, spec, lock)
    study.tell(optuna.trial.Trial(study, tid), state=TrialState.FAIL)
    assert len(missing_points(study, spec, arms)) == 6
    assert prepare_study(study, spec, arms, lock)[1] == 1  # only the failed point comes back
    assert len(study.get_trials(states=(TrialState.WAITING,))) == 6


def test_stale_trial_is_failed_and_retried(tmp_path):
    spec, arms, url, study, lock = _setup(tmp_path)
    prepare_study(study, spec, arms, lock)
    tid = take_trial(study, spec, lock)  # claimed, one heartbeat, then its worker "dies"
    point = study._storage.get_trial(tid).user_attrs["point"]
    import time

    time.sleep(2 * spec.heartbeat_interval + 1.5)
    with pytest.warns(optuna.exceptions.ExperimentalWarning):
        optuna.storages.fail_stale_trials(study)
    states = {t.number: t.state for t in study.get_trials()}
    assert states[0] == TrialState.FAIL
    retry = [t for t in study.get_trials(states=(TrialState.WAITING,)) if t.user_attrs["point"] == point]
    assert len(retry) == 1 and retry[0].system_attrs["failed_trial"] == 0


def test_tpe_asks_up_to_n_trials(tmp_path):
    spec, arms, url, study, lock = _setup(tmp_path, sampler="tpe", n_trials=4,
                                          axes={"optim.lr": {"low": 1e-4, "high": 1e-2, "log": True}})
    prepare_study(study, spec, arms, lock)
    seen = []
    while (tid := take_trial(study, spec, lock)) is not None:
        trial = optuna.trial.Trial(study, tid)
        values, seed, label = trial_values(trial, spec)
        assert 1e-4 <= values["optim.lr"] <= 1e-2 and label.startswith("lr=")
        seen.append(seed)
        study.tell(trial, values["optim.lr"])
    assert seen == [0, 1, 0, 1]


@pytest.mark.parametrize("sampler", ["random", "tpe"])
def test_an_arm_drawn_again_gets_a_seed_it_has_not_run(tmp_path, sampler):
    """Seeds went by trial number alone: an arm drawn at trials 0, 2 and 4 ran seed 0 three times (the same
    run) and never seed 1. Now a draw takes the seed the arm has run least."""
    spec, arms, url, study, lock = _setup(tmp_path, sampler=sampler, n_trials=8, axes={"optim.lr": [0.001, 0.002]})
    prepare_study(study, spec, arms, lock)
    runs = []
    while (tid := take_trial(study, spec, lock)) is not None:
        trial = claimed_trial(study, tid, spec)
        values, seed, label = trial_values(trial, spec)
        runs.append((label, seed))
        study.tell(trial, 1.0)
    for arm in {label for label, _ in runs}:
        seeds = [seed for label, seed in runs if label == arm]
        assert abs(seeds.count(0) - seeds.count(1)) <= 1, runs  # each draw ran the seed it had run least


@pytest.mark.parametrize("sampler", ["random", "tpe"])
def test_workers_and_reruns_draw_different_values(tmp_path, sampler):
    """Each worker (and each rerun) builds its own sampler: seeded alike, they drew the same values."""
    spec, arms, url, study, lock = _setup(tmp_path, sampler=sampler, n_trials=4,
                                          axes={"optim.lr": {"low": 1e-4, "high": 1e-2, "log": True}})
    prepare_study(study, spec, arms, lock)

    def run_until_done(workers):
        drawn = []
        while True:
            for own in workers:  # the workers take turns, each with its own study object
                if (tid := take_trial(own, spec, lock)) is None:
                    return drawn
                trial = claimed_trial(own, tid, spec)
                drawn.append(trial_values(trial, spec)[0]["optim.lr"])
                own.tell(trial, drawn[-1])

    first = run_until_done([open_study(spec, url, create=False) for _ in range(2)])
    spec.n_trials = 6  # a rerun with a larger budget: a fresh process, fresh samplers
    more = run_until_done([open_study(spec, url, create=False)])
    assert len(first) == 4 and len(more) == 2 and len(set(first + more)) == 6


def test_threads_per_trial_divides_cores(monkeypatch):
    monkeypatch.setattr("klear_lab.hardware.cpu_cores", lambda: 8)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert threads_per_trial(2, 0) == 4 and threads_per_trial(16, 0) == 1 and threads_per_trial(2, 3) is None
    env = trial_env(4, 2)
    assert env["OMP_NUM_THREADS"] == env["RAYON_NUM_THREADS"] == "4" and env["KLEAR_PARALLEL_WORKERS"] == "2"


def _run_one(study, spec, lock, value=1.0):
    tid = take_trial(study, spec, lock)
    trial = optuna.trial.Trial(study, tid)
    values, seed, label = trial_values(trial, spec)  # records the categorical choices, as a worker does
    study.tell(trial, value)
    return values, seed


def _widen(spec, change):
    if change == "seeds":
        spec.seeds = [0, 1, 2]
        return ["lr=0.001", "lr=0.002", "lr=0.003"], [2]
    spec.axes[0].values = [*spec.axes[0].values, 0.004]
    spec.axes[0].labels = [*spec.axes[0].labels, "0.004"]
    return ["lr=0.004"], [0, 1]


@pytest.mark.parametrize("change", ["seeds", "axis"])
def test_widened_grid_continues_in_a_successor_study(tmp_path, change):
    spec, arms, url, study, lock = _setup(tmp_path)
    prepare_study(study, spec, arms, lock)
    _run_one(study, spec, lock, 1.0)
    tid = take_trial(study, spec, lock)
    study.tell(optuna.trial.Trial(study, tid), state=TrialState.FAIL)  # its retry must survive the copy
    before = [(t.number, t.state, t.value, t.params, t.user_attrs) for t in study.get_trials()]
    new_arms, new_seeds = _widen(spec, change)
    arms = check_spec(spec)
    successor, added = prepare_study(study, spec, arms, lock)
    assert successor.study_name == "toy@v2" and added == 1 + len(new_arms) * len(new_seeds)
    copied = successor.get_trials()[:len(before)]
    assert [(t.number, t.state, t.value, t.params, t.user_attrs) for t in copied] == before
    old = study.get_trials()  # the old study: finished trials untouched, waiting ones handed over
    assert [t.state for t in old[:2]] == [TrialState.COMPLETE, TrialState.FAIL]
    assert all(t.state == TrialState.FAIL and t.user_attrs["superseded_by"] == "toy@v2" for t in old[2:])
    assert open_study(spec, url, create=False).study_name == "toy@v2"
    done = {t.user_attrs["point"] for t in copied if t.state == TrialState.COMPLETE}
    ran = []
    while (tid := take_trial(successor, spec, lock)) is not None:  # no "dynamic value space" refusal
        trial = optuna.trial.Trial(successor, tid)
        values, seed, label = trial_values(trial, spec)
        ran.append((label, seed))
        successor.tell(trial, 2.0)
    assert len(ran) == len(arms) * len(spec.seeds) - 1
    assert not done & {t.user_attrs["point"] for t in successor.trials[2:]}
    assert {(a, s) for a in new_arms for s in new_seeds} <= set(ran)
    assert missing_points(successor, spec, arms) == []


def test_a_second_widening_chains_and_open_study_follows(tmp_path):
    spec, arms, url, study, lock = _setup(tmp_path)
    prepare_study(study, spec, arms, lock)
    _run_one(study, spec, lock)
    _widen(spec, "seeds")
    v2, _ = prepare_study(study, spec, check_spec(spec), lock)
    _run_one(v2, spec, lock)
    _widen(spec, "axis")
    v3, added = prepare_study(open_study(spec, url, create=True), spec, check_spec(spec), lock)
    assert v3.study_name == "toy@v3" and added == 3
    assert open_study(spec, url, create=False).study_name == "toy@v3"
    assert [t.state for t in v3.get_trials()][:2] == [TrialState.COMPLETE, TrialState.COMPLETE]


def test_widening_waits_for_running_trials(tmp_path):
    spec, arms, url, study, lock = _setup(tmp_path)
    prepare_study(study, spec, arms, lock)
    take_trial(study, spec, lock)  # RUNNING, heartbeat fresh: a live worker somewhere
    waiting = len(study.get_trials(states=(TrialState.WAITING,)))
    _widen(spec, "seeds")
    with pytest.raises(ConfigError, match=r"adds seeds \[2\].*trial\(s\) \[0\] .* are running"):
        prepare_study(study, spec, check_spec(spec), lock)
    assert len(study.get_trials(states=(TrialState.WAITING,))) == waiting
    assert optuna.get_all_study_names(study._storage) == ["toy"]


def test_dropping_a_seed_keeps_the_study_and_the_table_shows_the_spec(tmp_path):
    from klear_lab.sweep.compare import load_records

    spec, arms, url, study, lock = _setup(tmp_path)
    prepare_study(study, spec, arms, lock)
    while take_trial(study, spec, lock) is not None:
        pass
    for t in study.get_trials():
        study.tell(optuna.trial.Trial(study, t._trial_id), 1.0)
    spec.seeds = [1]
    assert prepare_study(study, spec, arms, lock) == (study, 0)
    assert {(r.arm, r.seed) for r in load_records(spec, study)} == {(a.label, 1) for a in arms}


def test_waiting_trials_of_points_trimmed_from_the_spec_do_not_run(tmp_path):
    spec, arms, url, study, lock = _setup(tmp_path)  # 3 lrs x 2 seeds, all WAITING (an interrupted run)
    prepare_study(study, spec, arms, lock)
    trimmed = load_spec(write_spec(tmp_path, lrs=(0.001,), seeds=(0, 1)))
    prepare_study(study, trimmed, check_spec(trimmed), lock)
    claimed = []
    while (tid := take_trial(study, trimmed, lock)) is not None:
        claimed.append(study._storage.get_trial(tid).user_attrs["arm"])
    assert claimed == ["lr=0.001", "lr=0.001"]
    dropped = study.get_trials(states=(TrialState.FAIL,))
    assert len(dropped) == 4
    assert {t.user_attrs["error"] for t in dropped} == {"dropped: the spec no longer has this point"}
    assert prepare_study(study, spec, arms, lock)[1] == 4  # put back: enqueued again


def test_a_heartbeat_outlives_a_database_hiccup():
    """One failed heartbeat ended the thread, and the trial was taken for dead while it ran."""
    import time

    from klear_lab.sweep.claim import beating

    class Flaky:
        calls = 0

        def record_heartbeat(self, trial_id):
            Flaky.calls += 1
            if Flaky.calls == 1:
                raise RuntimeError("connection reset")

    with beating(Flaky(), 0, 0.05):
        time.sleep(0.5)
    assert Flaky.calls >= 3


def test_tpe_refuses_a_changed_categorical_axis_before_claiming(tmp_path):
    spec, arms, url, study, lock = _setup(tmp_path, sampler="tpe", n_trials=4)
    prepare_study(study, spec, arms, lock)
    _run_one(study, spec, lock)
    spec.axes[0].values = [*spec.axes[0].values, 0.004]
    with pytest.raises(ConfigError, match=r"optim.lr: study .* was run with .*--name NEW"):
        prepare_study(study, spec, arms, lock)
    assert study.get_trials(states=(TrialState.WAITING,)) == []


def test_tpe_refuses_a_range_axis_turned_log_before_claiming(tmp_path):
    """Optuna refused the changed range only in a claimed trial, and that worker stopped for the sweep."""
    spec, arms, url, study, lock = _setup(tmp_path, sampler="tpe", n_trials=4,
                                          axes={"optim.lr": {"low": 1e-4, "high": 1e-2}})
    prepare_study(study, spec, arms, lock)
    _run_one(study, spec, lock)
    spec.axes[0].log = True
    with pytest.raises(ConfigError, match=r"optim.lr: study .* was run with FloatDistribution\(.*log=False"):
        prepare_study(study, spec, arms, lock)
    spec.axes[0].log, spec.axes[0].high = False, 2e-2  # a wider range is fine: Optuna allows it
    prepare_study(study, spec, arms, lock)


def test_two_sweeps_widening_together_make_one_copy(tmp_path):
    spec, arms, url, study, lock = _setup(tmp_path)
    prepare_study(study, spec, arms, lock)
    _run_one(study, spec, lock)
    stale = open_study(spec, url, create=True)  # a second sweep process opened the study too
    _widen(spec, "seeds")
    arms = check_spec(spec)
    first, added = prepare_study(study, spec, arms, lock)
    second, again = prepare_study(stale, spec, arms, lock)  # it takes the lock after the first
    assert first.study_name == second.study_name == "toy@v2" and (added, again) == (3, 0)
    assert sorted(optuna.get_all_study_names(study._storage)) == ["toy", "toy@v2"]
    assert "klear.successor" not in first.user_attrs


def test_a_copy_left_half_way_is_replaced(tmp_path):
    spec, arms, url, study, lock = _setup(tmp_path)
    prepare_study(study, spec, arms, lock)
    _run_one(study, spec, lock)
    orphan = optuna.create_study(study_name="toy@v2", storage=study._storage)  # crashed mid-copy
    orphan.enqueue_trial({"optim.lr": 0.001, "run.seed": 0})
    _widen(spec, "seeds")
    successor, _ = prepare_study(study, spec, check_spec(spec), lock)
    assert successor.study_name == "toy@v2" and successor.trials[0].state == TrialState.COMPLETE
    assert len(successor.trials) == 9


def test_a_running_worker_follows_the_grid_to_its_copy(tmp_path, monkeypatch):
    from klear_lab.sweep import worker

    spec, arms, url, study, lock = _setup(tmp_path)
    prepare_study(study, spec, arms, lock)
    _run_one(study, spec, lock)
    monkeypatch.setattr(worker, "open_study", lambda *a, **k: study)  # opened before the widening
    ran = []

    def fake_run(ctx, own, trial_id, index, lock):
        trial = optuna.trial.Trial(own, trial_id)
        values, seed, label = trial_values(trial, spec)
        ran.append((own.study_name, label, seed))
        own.tell(trial, 1.0)

    monkeypatch.setattr(worker, "run_trial", fake_run)
    _widen(spec, "seeds")
    prepare_study(open_study(spec, url, create=True), spec, check_spec(spec), lock)
    worker.worker_loop(worker.WorkerContext(spec, url, tmp_path / "spec.yaml", 1, 1, poll_s=0.01), 0)
    assert len(ran) == 8 and {name for name, *_ in ran} == {"toy@v2"}


def test_a_joined_worker_waits_until_the_spec_grid_is_enqueued(tmp_path, monkeypatch, capsys):
    """``--join`` started while the main process widens the grid must not take the old, finished grid for
    the whole study: it stopped at once and reported the new points missing (seen in CI on PostgreSQL).
    While it waits it says so (it was silent for up to 10 minutes)."""
    from klear_lab.sweep import launch

    spec, arms, url, study, lock = _setup(tmp_path)  # 3 lrs x seeds (0, 1)
    narrow = load_spec(write_spec(tmp_path, seeds=(0,)))  # the grid before widening: seed 0 only
    prepare_study(study, narrow, check_spec(narrow), lock)
    monkeypatch.setattr(launch, "JOIN_WAIT_S", 0)
    with pytest.raises(ConfigError, match=r"3 grid point\(s\) of the spec have no trial yet \(lr=0.001 seed=1"):
        launch._wait_for_study(spec, url, arms)
    assert "--join: waiting up to 0s for study 'toy' to be created and filled by `klear-lab sweep" in (
        capsys.readouterr().err)
    widened, added = prepare_study(study, spec, arms, lock)  # what the main process does
    assert added == 3 and launch._wait_for_study(spec, url, arms).study_name == widened.study_name


def test_a_value_written_as_1_or_1_0_is_one_grid_point(tmp_path):
    """YAML types ``1`` and ``1.0`` by how they are written; editing one into the other reruns nothing."""
    spec, arms, url, study, lock = _setup(tmp_path, lrs=(1, 0.002))
    prepare_study(study, spec, arms, lock)
    while (tid := take_trial(study, spec, lock)) is not None:
        trial = optuna.trial.Trial(study, tid)
        values, _, _ = trial_values(trial, spec)
        study.tell(trial, values["optim.lr"])
    edited = load_spec(write_spec(tmp_path, seeds=(0, 1), lrs=(1.0, 0.002)))
    edited_arms = check_spec(edited)
    assert prepare_study(study, edited, edited_arms, lock)[1] == 0
    assert missing_points(study, edited, edited_arms) == []
    assert len(study.get_trials()) == 4
    from klear_lab.sweep.compare import load_records, summarize  # the table shows them under today's labels

    labels = [a.label for a in edited_arms]
    table = summarize(load_records(edited, study), "val/acc", [], "maximize", None, labels)
    assert table["arm"].tolist() == labels and table["n"].tolist() == [2, 2]


def test_a_point_enqueued_again_after_its_retries_continues_its_killed_run(tmp_path, monkeypatch):
    """Once a point's retries were used up, the rerun enqueued it afresh, with no retry history: the trial
    started over instead of continuing the checkpoint its killed run left."""
    from klear_lab import resume
    from klear_lab.sweep.retry import resumable_run
    from klear_lab.sweep.run_status import RUN_DIR_ATTR

    spec, arms, url, study, lock = _setup(tmp_path)
    prepare_study(study, spec, arms, lock)
    killed = take_trial(study, spec, lock)
    trial_values(optuna.trial.Trial(study, killed), spec)  # records the point, as a worker does
    study._storage.set_trial_user_attr(killed, RUN_DIR_ATTR, str(spec.runs_dir / "killed-run"))
    study._storage.set_trial_state_values(killed, TrialState.FAIL)  # retries used up: no WAITING copy
    assert prepare_study(study, spec, arms, lock)[1] == 1  # the rerun enqueues the point again
    cfg = spec.compose()
    monkeypatch.setattr(resume, "resume_config", lambda run_dir: cfg)  # the killed run: a checkpoint, same config
    again = next(t for t in study.get_trials(states=(TrialState.WAITING,))
                 if t.user_attrs["point"] == study._storage.get_trial(killed).user_attrs["point"])
    assert resumable_run(study, spec, again._trial_id, cfg) == str(spec.runs_dir / "killed-run")
    other = next(t for t in study.get_trials(states=(TrialState.WAITING,)) if t._trial_id != again._trial_id)
    assert resumable_run(study, spec, other._trial_id, cfg) is None  # another point: nothing to continue


def test_a_retry_that_started_over_supersedes_its_predecessors_run(tmp_path):
    """A trial killed (``kill -9``) before its first checkpoint was retried in a new run directory; the killed
    run said "running" for ever (``klear-lab runs``: stopped, "run the sweep again", which did nothing)."""
    from klear_lab.sweep.retry import queue_retry, superseded_runs
    from klear_lab.sweep.run_status import RUN_DIR_ATTR

    spec, arms, url, study, lock = _setup(tmp_path)
    prepare_study(study, spec, arms, lock)
    storage = study._storage

    def own(name: str) -> str:  # a trial's run is looked for in the sweep's own runs/ (SweepSpec.own_run_dir)
        return str(spec.runs_dir / name)

    def failed_attempt(run_dir: str) -> int:
        trial_id = take_trial(study, spec, lock)
        trial_values(optuna.trial.Trial(study, trial_id), spec)  # records the point, as a worker does
        storage.set_trial_user_attr(trial_id, RUN_DIR_ATTR, run_dir)
        storage.set_trial_state_values(trial_id, TrialState.FAIL)
        return trial_id

    killed = failed_attempt("run-a")
    retry = queue_retry(study, storage.get_trial(killed))
    assert retry.user_attrs[RUN_DIR_ATTR] == "run-a"  # inherited until its own run starts: nothing superseded
    assert superseded_runs(study, spec, retry._trial_id) == []
    assert take_trial(study, spec, lock) == retry._trial_id
    storage.set_trial_user_attr(retry._trial_id, RUN_DIR_ATTR, "run-b")  # started over (RecordRunDir)
    assert superseded_runs(study, spec, retry._trial_id) == [(own("run-a"), own("run-b"), retry.number)]
    storage.set_trial_state_values(retry._trial_id, TrialState.FAIL)  # killed too; the next attempt resumes it
    again = queue_retry(study, storage.get_trial(retry._trial_id))
    assert take_trial(study, spec, lock) == again._trial_id
    storage.set_trial_state_values(again._trial_id, TrialState.COMPLETE, [0.5])
    assert superseded_runs(study, spec, again._trial_id) == [(own("run-a"), own("run-b"), retry.number)]

    other = failed_attempt("run-c")  # another point: its runs are its own; enqueued again (no retry left)
    assert superseded_runs(study, spec, other) == [] and prepare_study(study, spec, arms, lock)[1] == 1
    point = storage.get_trial(other).user_attrs["point"]
    fresh = next(t for t in study.get_trials(states=(TrialState.WAITING,)) if t.user_attrs["point"] == point)
    assert RUN_DIR_ATTR not in fresh.user_attrs
    storage.set_trial_user_attr(fresh._trial_id, RUN_DIR_ATTR, "run-d")
    assert superseded_runs(study, spec, other) == [(own("run-c"), own("run-d"), fresh.number)]


def test_only_a_dead_interrupted_or_failed_run_is_recorded_superseded(tmp_path):
    """Never a run a live process writes (resumed by hand), one on another machine, or one that ended
    otherwise (completed); ``klear-lab runs`` then lists the superseded run as failed, saying why. A run that
    failed on its own error keeps it after the prefix."""
    import json
    import os
    import socket
    import subprocess
    import sys

    from klear_lab.run_list import list_runs
    from klear_lab.run_owner import running_process
    from klear_lab.sweep.run_status import mark_superseded

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    here = socket.gethostname()
    records = {"killed": {"status": "running", "pid": gone.pid, "pid_start": 1, "host": here},
               "ctrl-c": {"status": "failed", "error": "interrupted (Ctrl-C)"},
               "live": {"status": "running", **running_process()},
               "elsewhere": {"status": "running", "pid": os.getpid(), "host": "elsewhere"},
               "crashed": {"status": "failed", "error": "RuntimeError: boom"},
               "done": {"status": "completed"}}
    for name, record in records.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "run.json").write_text(json.dumps({**record, "tags": ["kind:sft"]}))
    marked = {name for name in records if mark_superseded(str(tmp_path / name), "runs/new", 7)}
    assert marked == {"killed", "ctrl-c", "crashed"} and not mark_superseded(str(tmp_path / "missing"), "runs/new", 7)
    assert json.loads((tmp_path / "crashed" / "run.json").read_text())["error"] == (
        "superseded: its trial's retry started over in runs/new (trial 7); its own error: RuntimeError: boom")
    killed = json.loads((tmp_path / "killed" / "run.json").read_text())
    assert killed == {"status": "failed", "host": here, "tags": ["kind:sft"],
                      "error": "superseded: its trial's retry started over in runs/new (trial 7)"}
    assert json.loads((tmp_path / "live" / "run.json").read_text())["status"] == "running"
    (row,) = list_runs([tmp_path / "killed"])
    assert row.status == "failed" and row.note.startswith("superseded: its trial's retry started over in runs/new")
    assert not mark_superseded(str(tmp_path / "killed"), "runs/other", 8)  # once


def test_a_ddp_trial_pruned_after_its_run_recorded_completion_is_recorded_pruned(tmp_path):
    """Under DDP the pruning decision surfaces after run_experiment wrote ``completed``: the stopped run
    looked finished to `klear-lab runs` and to model.init_from."""
    import json

    from klear_lab.sweep.run_status import mark_pruned

    (tmp_path / "run.json").write_text(json.dumps({"status": "completed", "config_hash": "abc"}))
    mark_pruned(str(tmp_path), "trial was pruned at step 20")
    record = json.loads((tmp_path / "run.json").read_text())
    assert record == {"status": "pruned", "config_hash": "abc", "error": "pruned: trial was pruned at step 20"}
    mark_pruned(None, "x")  # a runner that returned no run directory: nothing to mark


def test_an_edited_init_from_experiment_is_refused_once_trials_finished(tmp_path):
    """The base held the starting point's path only: later trials trained on another model than the finished."""
    root = Path(__file__).resolve().parents[3] / "experiments/quickstart"
    (tmp_path / "parent.yaml").write_text(f"base: {root / 'sft.yaml'}\n")
    spec = load_spec(write_spec(tmp_path))
    (tmp_path / "exp.yaml").write_text(f"base: {root / 'rl.yaml'}\nmodel: {{init_from: parent.yaml}}\n")
    lock = StudyLock(default_storage_url(spec), spec.name)
    study = open_study(spec, default_storage_url(spec), create=True)
    arms = check_spec(spec)
    prepare_study(study, spec, arms, lock)
    study.tell(optuna.trial.Trial(study, take_trial(study, spec, lock)), 0.5)
    (tmp_path / "parent.yaml").write_text(f"base: {root / 'sft.yaml'}\nsft: {{max_steps: 7}}\n")
    with pytest.raises(ConfigError, match=r"the model.init_from experiment.s sft.max_steps: -1 -> 7"):
        prepare_study(study, spec, arms, lock)


def test_a_ctrl_c_marks_only_the_run_of_the_killed_trial_process(tmp_path):
    """Matched on pid and host alone, the record of a ``kill -9``ed sweep's run with the same pid (pids repeat
    after a container restart) was marked, and the killed trial's own run stayed "running" (a review)."""
    import json
    import socket

    from klear_lab.sweep.run_status import mark_interrupted

    for name, start in (("old", 111), ("live", 222)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "run.json").write_text(json.dumps(
            {"status": "running", "pid": 57, "pid_start": start, "host": socket.gethostname()}))
    assert mark_interrupted(tmp_path, 57, 222) == tmp_path / "live"
    status = {name: json.loads((tmp_path / name / "run.json").read_text()) for name in ("old", "live")}
    assert status["old"]["status"] == "running" and status["live"]["error"] == "interrupted (Ctrl-C)"
    assert "pid" not in status["live"] and mark_interrupted(tmp_path, 57, 333) is None


def test_what_changed_reads_plainly():
    """Empty mappings showed as `{} -> "<unset>"` beside the real change, an added starting point listed
    every key of it, NaN showed as changed, and equal configs gave an empty reason (a review)."""
    from klear_lab.sweep.identity import config_changes

    old = {"base": {"eval": {"per_source": {}}, "x": [], "y": float("nan"), "lr": 1e-3}}
    new = {"base": {"eval": {"per_source": {"lcb": 4}}, "x": [{"a": 1}], "y": float("nan"), "lr": 2e-3},
           "init_from": {"sft": {"max_steps": 3}}}
    assert config_changes(old, new) == ("eval.per_source.lcb: (unset) -> 4; lr: 0.001 -> 0.002; x.0.a: (unset) -> 1; "
                                        "a model.init_from starting point added")
    assert config_changes(old, old) == ""


def test_tpe_and_random_draw_a_trial_under_the_study_lock(tmp_path, monkeypatch):
    """Two workers drawing one arm at once both counted its seeds before either recorded its own: both ran
    the seed the arm had run least. The draw and its recorded seed now happen under the study's lock."""
    import fcntl

    from klear_lab.sweep import worker

    spec, arms, url, study, lock = _setup(tmp_path, sampler="random", n_trials=2, axes={"optim.lr": [0.001, 0.002]})
    prepare_study(study, spec, arms, lock)
    trial_id = take_trial(study, spec, lock)
    held = []

    def look(trial, spec):
        with open(lock.lock_file, "a") as fh:  # another open file: refused while the worker holds the lock
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(fh, fcntl.LOCK_UN)
                held.append(False)
            except BlockingIOError:
                held.append(True)
        raise ValueError("drawn")  # the worker fails the trial here: nothing runs

    ctx = worker.WorkerContext(spec, url, tmp_path / "spec.yaml", 1, 1, poll_s=0.01)
    monkeypatch.setattr(worker, "trial_values", look)
    assert worker._run_claimed(ctx, study, trial_id, 0, lock) == TrialState.FAIL and held == [True]
