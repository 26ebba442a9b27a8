"""``klear-lab config``: the resolved config as YAML, what each key means (``--keys``), or what differs from
another config (``--diff``)."""

from __future__ import annotations

import argparse
import os
import sys

from klear_lab.errors import KlearError


def config_command(args: argparse.Namespace) -> int:
    from klear_lab.config.compose import compose
    from klear_lab.config.yaml_io import dump_yaml

    if args.keys is not None:
        if args.diff is not None:
            raise KlearError("config: --keys and --diff do not go together")
        return _config_keys(args)
    if args.diff is not None:
        return _config_diff(args)
    if not args.experiment:
        raise KlearError("config: give an experiment YAML (e.g. experiments/quickstart/sft.yaml), or --keys "
                         "[PREFIX] for what each key means")
    cfg = compose(args.experiment, args.overrides)
    sys.stdout.write(dump_yaml(cfg))
    return 0


def _config_diff(args: argparse.Namespace) -> int:
    """``config A [KEY=VALUE ...] --diff B``: the keys whose values differ, and which change the config hash; of
    two runs, whether they read different records too (``run.json``'s data digests)."""
    from klear_lab.config_diff import print_differences, recorded_data, records_differences, resolved
    from klear_lab.console import shown_path

    if not args.experiment:
        raise KlearError("config --diff: give the config to compare first, `klear-lab config A [KEY=VALUE ...] "
                         "--diff B` (each an experiment YAML, a config.yaml or a run directory)")
    label = " ".join([shown_path(args.experiment), *args.overrides])
    a, b = resolved(args.experiment, args.overrides), resolved(args.diff)
    run_a = None if args.overrides else recorded_data(args.experiment)  # with overrides, A is not that run
    runs_read = records_differences(run_a, recorded_data(args.diff), a["run"]["seed"] == b["run"]["seed"])
    print_differences(label, shown_path(args.diff), a, b, runs_read)  # exit 0, as for any difference
    return 0


def _config_keys(args: argparse.Namespace) -> int:
    """``config --keys [PREFIX]``: each key under PREFIX, its value (the schema's default, or the experiment's
    when one is given) and what it means (the schema's field docstrings; a component's own docstring)."""
    from klear_lab.config.compose import compose
    from klear_lab.config.show import print_key_table

    if args.experiment and "=" in args.experiment and not os.path.exists(args.experiment):
        args.overrides, args.experiment = [args.experiment, *args.overrides], None  # `--keys rl rl.alpha=0.3`
    if args.keys.endswith((".yaml", ".yml")) and not args.experiment:
        raise KlearError(f"--keys takes a key prefix, not {args.keys!r}: the experiment goes first, "
                         "`klear-lab config EXPERIMENT --keys [PREFIX]`")
    print_key_table(compose(args.experiment or None, args.overrides), args.keys, args.experiment, args.overrides)
    return 0
