"""Sweeps: Optuna studies over config axes, one process and one W&B run per trial, and ablation tables.

Commands (``klear_lab/cli_sweep.py``)::

    klear-lab sweep SPEC [key=value ...] [--workers N] [--join] [--validate-only] [--wandb-export]
    klear-lab compare SWEEP_DIR_or_SPEC
    klear-lab dashboard SWEEP_DIR_or_SPEC [--port 8080]

``key=value`` after SPEC override the *base experiment* (applied after the spec's own
``overrides:`` list, before the trial layer); they are part of the study's identity, so a
resume with different overrides is refused.

Pipeline: ``spec.load_spec`` parses the YAML, ``checks.check_spec`` composes every axis value
and grid arm through ``compose()`` (errors name the spec file and key) before any trial;
``queue.prepare_study`` enqueues every grid point x seed once (a grid that gained seeds or axis
values continues in a copy of its study, ``successor``); ``parents.train_parent`` trains a
shared ``model.init_from`` starting point on every core (once; trials then find it by hash); ``worker`` threads claim
WAITING trials, compose ``base + overrides + [sweep trial N]`` and start one process per trial
(``launcher``: forked from a forkserver that imported torch & co. once, or with
``trial_start: fresh`` a new ``python -m klear_lab.sweep.trial``), recording Optuna heartbeats;
``compare`` builds the table at the end.

Sweep directory layout (``out_dir`` / ``name``, default ``sweep_runs/<spec stem>/``)::

    spec.yaml            frozen copy of the spec (absolute paths, merged overrides, storage URL)
    sweep.json           name, storage URL, original spec path
    study.db             default SQLite storage (any SQLAlchemy URL via ``storage:``)
    study.db.lock        flock guarding enqueue / claim (SQLite only)
    trials/trial-NNNN.json   job file: trial id, resolved config, runner, objective
    trials/trial-NNNN.log    the trial process' stdout + stderr
    parent.log           output of the shared starting point's training (``model.init_from``)
    runs/<run dirs>      run_experiment outputs (config.yaml, metrics.csv, summary.json, wandb/)
    compare/table.csv, compare/table.md, compare/curves.png
    wandb_sweep.yaml     from ``--wandb-export``

Trial user attrs: ``arm``, ``seed``, ``point`` (resume key), ``log``, then ``run_dir``,
``metrics``, ``wandb_dir`` (or ``error`` / ``pruned``).
"""

from __future__ import annotations
