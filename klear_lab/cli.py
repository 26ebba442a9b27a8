"""``klear-lab`` command line: train, resume, eval, runs, config, components (+ sweep, compare, reproduce,
dashboard).

Exit codes: 0 success, 2 bad input (config, data, CLI usage), 1 anything else.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import warnings
from pathlib import Path

from klear_lab.cli_args import expand_user, parse_args
from klear_lab.cli_config import config_command
from klear_lab.distributed import joined_run_dir, record_rank_failure
from klear_lab.errors import ConfigError, KlearError, interrupted
from klear_lab.resume import RESUME_OVERRIDABLE
from klear_lab.run_list import STATUSES
from klear_lab.run_report import print_result


def _train(args: argparse.Namespace) -> int:
    from klear_lab.attempts import warn_if_elsewhere, warn_if_other_data
    from klear_lab.config.compose import compose

    cfg = compose(args.experiment, args.overrides)
    saved = Path(args.experiment).parent  # a run's saved config.yaml, rerun: say what may differ from the run
    rerun = Path(args.experiment).name == "config.yaml" and (saved / "run.json").is_file()
    if rerun and joined_run_dir() is None:
        warn_if_elsewhere(saved, "rerunning its saved config")
        if not args.dry_run:  # it reads the data files, which a dry run does not
            warn_if_other_data(saved, cfg, overridden=bool(args.overrides))
    if args.dry_run:
        return _dry_run(cfg, args.experiment)
    from klear_lab.run import run_experiment
    from klear_lab.tracking import launched_by

    with launched_by(["klear-lab", "train", args.experiment, *args.overrides]):
        result = run_experiment(cfg, hold_start=True)  # runs and sweeps starting from it wait for it
    _run_done()
    if joined_run_dir() is None:  # DDP ranks > 0 run this command again: rank 0 reports
        print_result(result)
    return 0


def _resume(args: argparse.Namespace) -> int:
    from klear_lab.resume import resume_command_config
    from klear_lab.resume_trial import trial_refusal
    from klear_lab.run import run_experiment
    from klear_lab.run_list import sweep_trial

    run_dir = Path(args.run_dir)
    if (sweep := sweep_trial(run_dir.resolve())) is not None:  # its sweep continues it, or says why not
        raise trial_refusal(run_dir, sweep)
    result = run_experiment(resume_command_config(run_dir, args.overrides), resume=str(run_dir), hold_start=True)
    _run_done()
    if joined_run_dir() is None:
        print_result(result)
    return 0


def _eval(args: argparse.Namespace) -> int:
    from klear_lab.run import run_experiment
    from klear_lab.stages.eval import eval_config

    cfg = eval_config(args.target, args.overrides)
    if args.dry_run:
        return _dry_run(cfg, args.target)
    from klear_lab.tracking import launched_by

    with launched_by(["klear-lab", "eval", args.target, *args.overrides]):
        result = run_experiment(cfg)
    _run_done()
    print_result(result)
    return 0


_RUN_COMPLETED = False  # this process's command completed a run (see _run_done)


def _run_done() -> None:
    """The run's ``run.json`` says completed; the command only reports and exits from here. A SIGTERM now (a
    scheduler's time limit in the last second, ``docker stop``) ended it with 143, which a scheduler reads as
    preempted, and the requeued ``klear-lab resume`` was refused: "already completed". Ignore SIGTERM from
    here: :func:`main` hands the handler back when it returns, and the ``klear-lab`` command (:func:`entry`)
    keeps ignoring it while the interpreter exits."""
    global _RUN_COMPLETED
    _RUN_COMPLETED = True
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is not None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # (main thread only; None: a handler main cannot put back)


def _dry_run(cfg: dict, source: str | Path) -> int:
    """Print the plan; a row that says NOT SUPPORTED then fails the command like the run's ConfigError
    would (exit 2), so a script checking configs with ``--dry-run`` sees it. Rows that say something is
    not available on this machine do not: the config may be meant for another one."""
    from klear_lab.dry_run import dry_run, unsupported

    problems = unsupported(dry_run(cfg, source))
    if problems:
        raise ConfigError(f"the plan above cannot run: {'; '.join(problems)}")
    return 0


def _components(args: argparse.Namespace) -> int:
    from klear_lab.config.describe import component_keys, resolve_axes
    from klear_lab.config.show import component_table, describe_component
    from klear_lab.console import make_console
    from klear_lab.errors import ConfigError
    from klear_lab.plugins import load_entry_point_plugins, load_plugins
    from klear_lab.registry import REGISTRIES

    load_entry_point_plugins()
    load_plugins(args.plugin or [], "--plugin")
    axes = resolve_axes(args.axis) if args.axis else list(REGISTRIES)
    keys = component_keys()
    console = make_console()
    if args.name is not None:
        if len(axes) != 1:
            key = f"{args.axis}.{args.name}"
            did = f" (did you mean `klear-lab components {key}`?)" if key in keys else ""
            raise KlearError(f"{args.axis!r} holds several axes ({', '.join(axes)}): give one to describe "
                             f"{args.name!r}{did}")
        try:
            describe_component(console, axes[0], args.name, [k for k, a in keys.items() if a == axes[0]])
        except ConfigError as exc:  # the registry's hint is a config's `plugins:`; this command takes --plugin
            hint = f"needs its file: klear-lab components {args.axis} {args.name} --plugin FILE.py"
            raise ConfigError(str(exc).replace("needs its file under `plugins:`", hint)) from None
        return 0
    for axis in axes:
        component_table(console, axis, [k for k, a in keys.items() if a == axis], args.axis if len(axes) == 1 else None)
    return 0


def _runs(args: argparse.Namespace) -> int:
    from pathlib import Path

    from klear_lab.run_list import list_runs, missing_metric, unrecorded_run_dirs
    from klear_lab.run_table import print_runs

    paths = args.paths or [p for p in ("runs", "sweep_runs") if Path(p).is_dir()]
    if not paths:  # a fresh clone: nothing has run yet, which is an answer, not an error
        print(f"no runs yet under {Path.cwd()} (no runs/ or sweep_runs/ directory)",
              file=sys.stderr if args.json else sys.stdout)  # --json: stdout stays JSON lines
        return 0
    rows = list_runs(paths, args.metric, args.status)
    missing = missing_metric(rows, args.metric)  # a misspelt --metric printed an empty column and exit 0
    if missing is not None and missing[1]:  # an error: said before any table (or JSON line), nothing on stdout
        print(f"klear-lab: error: {missing[0]}", file=sys.stderr)
        return 2
    which = f"{' or '.join(dict.fromkeys(args.status))} " if args.status else ""  # none: "no failed runs"
    print_runs(rows, args.metric, args.json, nothing=f"no {which}runs under {', '.join(map(str, paths))}")
    if missing is not None:  # a metric not logged yet: the table, then the note
        print(f"klear-lab: note: {missing[0]}", file=sys.stderr)
    if unlisted := unrecorded_run_dirs(paths):  # a run that lost its run.json vanished from the table
        print(f"klear-lab: note: {len(unlisted)} run director{'y' if len(unlisted) == 1 else 'ies'} without a "
              f"run.json not listed (status unknown; the first: {unlisted[0]})", file=sys.stderr)
    return 0


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("klear-lab")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "(not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="klear-lab", description="Reasoning post-training ablations: train, resume, eval, runs, config, "
        "components, sweep, compare, reproduce, dashboard. Exit codes: 0 success, 2 bad input (config, data, "
        "usage), 130 Ctrl-C, 143 SIGTERM, 1 anything else.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("train", help="run one experiment")
    p.add_argument("experiment", type=expand_user, help="experiment YAML (e.g. experiments/quickstart/sft.yaml)")
    p.add_argument("overrides", nargs="*", default=[], help="key=value overrides (Hydra-style dotlist)")
    p.add_argument("--dry-run", action="store_true", help="build on the meta device and print the plan")
    p.set_defaults(func=_train)
    p = sub.add_parser("resume", help="continue a stopped SFT or RL run from its last checkpoint")
    p.add_argument("run_dir", type=expand_user, help="the run directory (config.yaml, run.json, checkpoints/last.ckpt)")
    p.add_argument("overrides", nargs="*", default=[], help=f"key=value of {', '.join(RESUME_OVERRIDABLE)} (nothing "
                   "that changes what the run computes)")
    p.set_defaults(func=_resume)
    p = sub.add_parser("eval", help="score a trained model on held-out sets (greedy or avg@k)")
    p.add_argument("target", type=expand_user,
                   help="a finished run directory (its config and final model) or an experiment YAML")
    p.add_argument("overrides", nargs="*", default=[],
                   help="key=value, e.g. eval.samples=32 eval.temperature=0.6 eval.top_p=0.95")
    p.add_argument("--dry-run", action="store_true", help="print the evaluation plan, load nothing")
    p.set_defaults(func=_eval)
    p = sub.add_parser("runs", help="list runs and their status: running, stopped (its process died), failed, "
                       "pruned, completed, unknown (running on another machine); how to continue the stopped ones")
    p.add_argument("paths", nargs="*", default=[], help="run, runs or sweep directories (default: runs/ and "
                   "sweep_runs/ here; when neither exists it says there are no runs yet and exits 0, while a directory "
                   "given here that does not exist is an error, exit 2)")
    p.add_argument("--status", action="append", choices=STATUSES, help="only runs with this status (repeatable)")
    p.add_argument("--metric", default="val/acc", help="the metric column (default: val/acc)")
    p.add_argument("--json", action="store_true", help="one JSON object per run instead of a table")
    p.set_defaults(func=_runs)
    p = sub.add_parser("config", help="print the resolved config, or (--keys) what each key means",
                       description="Print the resolved config as YAML. `klear-lab config --keys [PREFIX]` lists "
                       "the keys (e.g. --keys rl, --keys rl.alpha) with their defaults and descriptions; after an "
                       "experiment, with its values.")
    p.add_argument("experiment", nargs="?", type=expand_user, help="experiment YAML (e.g. "
                   "experiments/quickstart/sft.yaml); with --diff, also a config.yaml or a run directory")
    p.add_argument("overrides", nargs="*", default=[], help="key=value overrides (Hydra-style dotlist)")
    p.add_argument("--keys", nargs="?", const="", metavar="PREFIX",
                   help="list the config keys at or under PREFIX (all when omitted), each with its value and "
                   "description, instead of the YAML")
    p.add_argument("--diff", type=expand_user, metavar="OTHER",
                   help="instead of the YAML, the keys whose values differ from OTHER's (an experiment YAML, a "
                   "config.yaml or a run directory; the overrides apply to the first), and whether each changes "
                   "the config hash (a different run) or only names, seeds or tracking")
    p.set_defaults(func=config_command)
    p = sub.add_parser("components", help="list registered components and their parameters")
    p.add_argument("axis", nargs="?", help="one axis (clip, reward, data_mix, difficulty_filter, ...), or the config "
                   "key naming one (rl.clip, data.filter, data.mix) or its last part (filter, mix, group_filter)")
    p.add_argument("name", nargs="?", help="one component of the axis: its whole description and parameters")
    p.add_argument("--plugin", action="append", help="import a plugin module or .py file first")
    p.set_defaults(func=_components)
    try:
        from klear_lab.cli_sweep import add_sweep_commands
    except ImportError:  # sweep subsystem not installed in this build
        pass
    else:
        add_sweep_commands(sub)
    return parser


PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_default_format = warnings.formatwarning


def format_warning(message, category, filename, lineno, line=None) -> str:  # noqa: ANN001 - warnings' hook
    """klear-lab's own warnings (about a config, a run) as one line: the default format adds the source line
    of the call, which reads as part of the message (``"settings": settings, "optim": ...``)."""
    if issubclass(category, UserWarning) and os.path.abspath(filename).startswith(PACKAGE_DIR + os.sep):
        return f"klear-lab: warning: {message}\n"
    return _default_format(message, category, filename, lineno, line)


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("WANDB_SILENT", "true")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args = parse_args(build_parser(), argv)
    before, warnings.formatwarning = warnings.formatwarning, format_warning
    on_sigterm = signal.getsignal(signal.SIGTERM)
    try:
        return _run_command(args)
    finally:
        warnings.formatwarning = before
        if threading.current_thread() is threading.main_thread() and on_sigterm is not None:
            signal.signal(signal.SIGTERM, on_sigterm)  # a caller's own (a notebook, a test): see _run_done


def entry() -> None:
    """The ``klear-lab`` command: :func:`main`, then exit with its code. After a completed run the interpreter's
    exit (W&B's teardown, torch's) can take seconds; a SIGTERM during it no longer turns that 0 into 143.
    After anything else SIGTERM still ends the process (``timeout`` stops a hung exit so)."""
    code = main()
    if _RUN_COMPLETED and code == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.exit(code)


def _run_command(args: argparse.Namespace) -> int:
    try:
        return args.func(args)
    except KlearError as exc:
        if (joined := joined_run_dir()) is not None:  # composing failed on a DDP rank > 0: rank 0 is told
            from klear_lab.run import error_line

            record_rank_failure(joined, error_line(exc))
        notes = "".join(f" ({note})" for note in getattr(exc, "__notes__", []))  # where it came from
        print(f"klear-lab: error: {exc}{notes}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("klear-lab: interrupted", file=sys.stderr)
        return 130
    except SystemExit as exc:
        if interrupted(exc):  # Lightning's sys.exit(1) after a Ctrl-C inside fit
            print("klear-lab: interrupted: `klear-lab runs` says how to continue", file=sys.stderr)
            return 130
        if type(exc).__name__ != "SIGTERMException":  # Lightning's: no exit code, Python would exit 0
            raise
        if joined_run_dir() is None:  # once, not once per DDP rank
            print("klear-lab: terminated (SIGTERM): `klear-lab runs` says how to continue",
                  file=sys.stderr)
        return 143


if __name__ == "__main__":
    entry()
