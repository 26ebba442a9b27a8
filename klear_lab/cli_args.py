"""Argument parsing shared by ``klear-lab`` and the standalone sweep CLI."""

from __future__ import annotations

import argparse
import os


def parse_args(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """``parse_args``, but ``key=value`` overrides may also follow the options
    (``klear-lab sweep SPEC --workers 2 rl.steps=5``); argparse alone stops at the first option."""
    args, extra = parser.parse_known_args(argv)
    extra = [a for a in extra if a != "--"]  # `... --workers 2 -- a=1`: the separator is not an override
    stray = [a for a in extra if a.startswith("-") or "=" not in a]
    if stray or (extra and not isinstance(getattr(args, "overrides", None), list)):
        parser.error(f"unrecognized arguments: {' '.join(stray or extra)}")
    if extra:
        args.overrides = [*args.overrides, *extra]
    return args


def expand_user(value: str) -> str:
    """A path argument with ``~`` expanded (argparse ``type``): no shell expands a quoted ``'~/runs'``."""
    return os.path.expanduser(value)
