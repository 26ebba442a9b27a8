"""Which part of a sweep spec a config error belongs to, so that ``--validate-only`` names it (registers nothing).

The axis checks compose every axis value with the other axes' first values and the settings the sweep gives
each trial (W&B project and group, output directory, names). An error from those settings, or from another
axis's unknown key, was reported under the axis being probed: ``axes.optim.lr: ... unknown key 'rl.lr'``.
"""

from __future__ import annotations

import re

from klear_lab.errors import ConfigError
from klear_lab.sweep.grid import trial_layer
from klear_lab.sweep.spec import SweepSpec


def check_trial_settings(spec: SweepSpec) -> None:
    """Compose the base with what the sweep sets on every trial and no axis value: an error is the spec's own
    (``wandb:``, ``out_dir:``, ``name:``), whatever the axes."""
    try:
        spec.compose([trial_layer(spec, {}, spec.seeds[0], None, None, "check")])
    except ConfigError as exc:
        raise ConfigError(f"{spec.path}: what the sweep sets on every trial (from wandb:, out_dir:, name:): "
                          f"{exc}") from None


def unknown_axis(spec: SweepSpec, message: str) -> str | None:
    """``axes.KEY`` of the axis whose key ``message`` calls unknown (or not a parameter of its component), or
    None."""
    found = re.search(r"unknown key '([^']+)'|'([^']+)' is not a parameter of", message)
    if found is None:
        return None
    key = found.group(1) or found.group(2)
    return next((f"axes.{a.key}" for a in spec.axes
                 if key == a.key or key.startswith(f"{a.key}.") or a.key.startswith(f"{key}.")), None)
