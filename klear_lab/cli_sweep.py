"""``klear-lab sweep | compare | reproduce | dashboard``: added to the main CLI by ``add_sweep_commands``.

Standalone: ``python -m klear_lab.cli_sweep sweep sweeps/quickstart.yaml --workers 2``.
Handlers return an exit code; ``KlearError`` (bad spec, bad storage) maps to 2 in ``main``.
"""

from __future__ import annotations

import argparse
import sys

from klear_lab.cli_args import parse_args
from klear_lab.errors import KlearError


def _sweep(args: argparse.Namespace) -> int:
    from klear_lab.sweep.launch import run_sweep

    return run_sweep(args.spec, args.overrides, workers=args.workers, join=args.join,
                     validate_only=args.validate_only, wandb_export=args.wandb_export,
                     compare=not args.no_compare, name=args.name, out_dir=args.out_dir)


def _compare(args: argparse.Namespace) -> int:
    from pathlib import Path

    from klear_lab.sweep.compare import compare_study
    from klear_lab.sweep.locate import locate
    from klear_lab.sweep.spec import with_baseline
    from klear_lab.sweep.storage import open_study

    spec, url = locate(_compare_target(args))
    spec = with_baseline(spec, args.baseline)  # a wrong one stops before the study is read
    study = open_study(spec, url, create=False, heartbeat=False)
    out_dir = Path(args.out_dir).expanduser().absolute() if args.out_dir else None
    if args.rescore:
        from klear_lab.sweep.rescore import rescore_study

        if args.baseline is not None and spec.sampler != "grid":  # an arm never sampled: refused before scoring
            from klear_lab.sweep.compare import load_records, table_arms

            table_arms(spec, load_records(spec, study))
        _, failed = rescore_study(spec, study, args.rescore, out_dir=out_dir)  # bad overrides raise before any scoring
        if failed:
            print(f"klear-lab: {failed} trial(s) could not be scored (see above); the table counts them as failed",
                  file=sys.stderr)
            return 1
    else:
        compare_study(spec, study, out_dir, require_finished=True)
    return 0


def _compare_target(args: argparse.Namespace) -> str:
    """The sweep ``compare`` reads. ``compare --rescore K=V ... TARGET``: ``--rescore`` (nargs='+') took the
    target too, which argparse then said was missing; an override is ``KEY=VALUE`` with a dotted key, so its
    last value that is not one (a path holding '=' included) is the target. Also sets ``args.rescore`` to the
    overrides alone.

    Raises:
        KlearError: no target, or ``--rescore`` without an override once the target is taken from it.
    """
    if args.target is None and args.rescore and not _is_override(args.rescore[-1]):
        args.target = args.rescore.pop()
        if not args.rescore:
            raise KlearError(f"--rescore takes at least one KEY=VALUE (e.g. eval.samples=8): klear-lab compare "
                             f"{args.target} --rescore KEY=VALUE ...")
    if args.target is None:
        raise KlearError("compare: no sweep given: give its directory (sweep_runs/NAME) or spec file: "
                         "klear-lab compare TARGET [--rescore KEY=VALUE ...]")
    return args.target


def _is_override(value: str) -> bool:
    """``KEY=VALUE`` with a dotted config key, and not a path that exists (``sweep_runs/lr=0.1``)."""
    import re
    from pathlib import Path

    return re.match(r"[A-Za-z_][\w.]*=", value) is not None and not Path(value).expanduser().exists()


def _reproduce(args: argparse.Namespace) -> int:
    from pathlib import Path

    from klear_lab.analysis import NoResults, load_analysis, run_reproduction
    from klear_lab.analysis.summary import print_summary, summary_markdown
    from klear_lab.sweep.spec import user_path
    from klear_lab.tracking import atomic_write

    path = user_path(args.analysis)
    many = path.is_dir()
    if many and (path / "sweep.json").is_file():  # its spec.yaml and wandb_sweep.yaml are no analyses
        raise KlearError(f"{path}: a sweep directory, not an analysis: reproduce takes an analysis spec first, then "
                         f"the sweep to read (klear-lab reproduce analysis/ANALYSIS.yaml {args.analysis}); its arms "
                         f"side by side: klear-lab compare {args.analysis}")
    if many and (args.target or args.out_dir):
        raise KlearError(f"{path}: a directory of analyses takes no sweep target or --out-dir")
    if args.summary and (not many or args.validate_only):
        raise KlearError("--summary goes with a directory of analyses (klear-lab reproduce analysis/ --summary F)")
    summary = user_path(args.summary) if args.summary else None
    if summary and summary.is_dir():
        raise KlearError(f"--summary {args.summary}: is a directory; give a file name such as claims.md")
    paths = sorted(path.glob("*.yaml")) if many else [path]
    if not paths:
        raise KlearError(f"{path}: no analysis specs (*.yaml) in this directory")
    reps, skipped, failed = [], [], []
    for p in paths:
        try:
            if args.validate_only:
                analysis = load_analysis(p)
                print(f"ok: {p}: {analysis.title} ({len(analysis.sweeps)} sweep(s), {len(analysis.claims)} claim(s))")
            else:
                reps.append(run_reproduction(p, args.target, args.out_dir, wandb=not args.no_wandb))
        except NoResults as exc:
            if not many:
                raise
            print(f"skipped: {exc}")
            skipped.append(p.stem)
        except KlearError as exc:  # one bad analysis does not hide the others' results
            if not many:
                raise
            print(f"klear-lab: error: {exc}", file=sys.stderr)
            failed.append(p.stem)
    if many and not args.validate_only and not reps and not failed:  # a table of nothing, exit 0: as if reproduced
        raise NoResults(f"{path}: no results yet for any of its {len(paths)} analyses: run the sweeps named above")
    if many and not args.validate_only and (reps or skipped):  # every analysis failed: no empty table
        print_summary(reps, skipped)
        if summary:
            summary.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(summary, lambda tmp: Path(tmp).write_text(summary_markdown(reps, skipped)))
            print(f"summary: {summary}")
    if failed:
        print(f"klear-lab: error: {len(failed)} analysis spec(s) failed: {', '.join(failed)}", file=sys.stderr)
        return 2
    return 0


def _dashboard(args: argparse.Namespace) -> int:
    from klear_lab.sweep.locate import serve_dashboard

    serve_dashboard(args.target, host=args.host, port=args.port)
    return 0


def add_sweep_commands(subparsers: argparse._SubParsersAction) -> None:
    """Add ``sweep``, ``compare``, ``reproduce`` and ``dashboard`` to the ``klear-lab`` subcommands."""
    p = subparsers.add_parser("sweep", help="run, resume or join an Optuna sweep from a spec (sweeps/*.yaml)",
                              description="Run every grid point x seed once, one process and W&B run per "
                                          "trial; rerun the same command to resume.")
    p.add_argument("spec", help="sweep spec YAML (e.g. sweeps/quickstart.yaml)")
    p.add_argument("overrides", nargs="*", default=[], help="key=value overrides of the base experiment")
    p.add_argument("--workers", type=int, default=None, help="parallel trials here (default: spec workers)")
    p.add_argument("--join", action="store_true",
                   help="add workers to an existing study (any machine sharing its storage)")
    p.add_argument("--validate-only", action="store_true",
                   help="check the spec, every arm and the data they read; run nothing")
    p.add_argument("--wandb-export", action="store_true",
                   help="write the equivalent W&B sweep config (SWEEP_DIR/wandb_sweep.yaml) and stop")
    p.add_argument("--no-compare", action="store_true", help="skip the comparison table at the end")
    p.add_argument("--name", default=None, help="study name (default: the spec's name or file stem)")
    p.add_argument("--out-dir", default=None, help="parent of the sweep directory (default: spec out_dir)")
    p.set_defaults(func=_sweep)
    p = subparsers.add_parser("compare", help="comparison table of a sweep (arms x seeds, delta vs baseline)",
                              usage="%(prog)s [-h] TARGET [--baseline ARM] [--rescore KEY=VALUE [KEY=VALUE ...]] "
                                    "[--out-dir DIR]",
                              description="The table of a sweep's study in SWEEP_DIR/compare/. The baseline is "
                                          "--baseline, else the `baseline:` of the target: the spec file as it "
                                          "is now, or for a sweep directory the spec.yaml frozen when the sweep "
                                          "ran; the table's notes say which.")
    p.add_argument("target", nargs="?", default=None, metavar="TARGET",  # required: _compare_target (after --rescore)
                   help="sweep directory (sweep_runs/NAME: baseline from its frozen spec.yaml) or a "
                        "spec file (baseline from that file as it is now)")
    p.add_argument("--baseline", default=None, metavar="ARM",
                   help="the arm the deltas are taken against, as `baseline:` takes it: a label such as "
                        "clip=gppo, or a mapping such as '{rl.clip.name: gppo}'; in a tpe/random sweep, an arm "
                        "it sampled")
    p.add_argument("--rescore", nargs="+", metavar="KEY=VALUE", default=None,
                   help="score every finished trial again with these eval overrides (e.g. eval.samples=8 "
                        "eval.temperature=0.6 eval.top_p=0.95), as eval runs, then compare those numbers")
    p.add_argument("--out-dir", default=None, metavar="DIR",
                   help="where the table and curves go (default: SWEEP_DIR/compare; for a read-only sweep directory); "
                        "with --rescore, DIR/runs gets the eval runs and DIR/rescore-HASH the table")
    p.set_defaults(func=_compare)
    p = subparsers.add_parser("reproduce", help="a paper table or figure next to a sweep's results (analysis/*.yaml)",
                              description="Put the paper's numbers beside a sweep's arms and check each of the "
                                          "paper's claims against it (Welch t 95 % intervals over seeds).")
    p.add_argument("analysis", help="analysis spec (analysis/fig2_clip.yaml) or a directory of them (analysis/)")
    p.add_argument("target", nargs="?", default=None,
                   help="sweep directory or spec (default: the first of the analysis's sweeps that has results)")
    p.add_argument("--out-dir", default=None, help="where to write (default: SWEEP_DIR/reproduce/ANALYSIS)")
    p.add_argument("--validate-only", action="store_true", help="check the analysis specs, read no study")
    p.add_argument("--no-wandb", action="store_true", help="do not log the reproduction as a W&B run")
    p.add_argument("--summary", default=None, help="with a directory: also write the claims summary (markdown) here")
    p.set_defaults(func=_reproduce)
    p = subparsers.add_parser("dashboard", help="serve optuna-dashboard for a sweep's study")
    p.add_argument("target", help="sweep directory (sweep_runs/NAME) or its spec file")
    p.add_argument("--host", default="127.0.0.1", help="address to serve on (default: 127.0.0.1, this machine "
                   "only; reach it from elsewhere through an SSH tunnel)")
    p.add_argument("--port", type=int, default=8080, help="port to serve on (default: 8080)")
    p.set_defaults(func=_dashboard)


def main(argv: list[str] | None = None) -> int:
    """Run one sweep subcommand without the rest of the CLI."""
    parser = argparse.ArgumentParser(prog="klear-lab")
    add_sweep_commands(parser.add_subparsers(dest="command", required=True))
    args = parse_args(parser, argv)
    try:
        return args.func(args)
    except KlearError as exc:
        print(f"klear-lab: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
