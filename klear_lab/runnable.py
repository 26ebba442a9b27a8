"""Why ``klear-lab train`` would refuse a config as it starts: Lightning refusing its trainer settings on this
machine, an RL config that cannot run on its devices, or an attention implementation transformers does not
know. ``train --dry-run`` and ``sweep`` (``--validate-only`` too) ask it, so that neither passes a config the
run refuses."""

from __future__ import annotations

from typing import Any

from klear_lab.errors import ConfigError


def runnable_problem(cfg: dict[str, Any]) -> str | None:
    """Why ``klear-lab train`` would refuse ``cfg`` as it starts (None: it would not): Lightning refusing its
    trainer settings here, an RL config that cannot run on its devices, or an unknown attention name.

    The stage's own check (``prepare_rl`` calls ``multi_device_rl_problem`` first), so a sweep whose
    arms cannot run stops before a study exists instead of failing every trial. ``strategy: auto`` is
    checked as the trial process sees it: a fresh, non-interactive process (DDP), even when this sweep
    runs in a notebook.
    """
    found = runnable_row(cfg)
    return found[1] if found else None


def runnable_row(cfg: dict[str, Any]) -> tuple[str, str] | None:
    """:func:`runnable_problem` with the dry-run plan row it belongs to: ``attention``, ``training devices``
    (the row RL's plan fills itself) or ``trainer settings``."""
    if problem := attention_problem(cfg["model"]["attn_implementation"]):
        return "attention", problem
    if cfg["run"]["kind"] not in ("sft", "rl"):
        return None
    if cfg["run"]["kind"] == "rl":
        from klear_lab.distributed import multi_device_rl_problem

        ddp = {**cfg["trainer"], "strategy": "ddp"} if cfg["trainer"]["strategy"] == "auto" else cfg["trainer"]
        if problem := multi_device_rl_problem({**cfg, "trainer": ddp}):
            return "training devices", problem
    problem = _trainer_problem(cfg["trainer"])
    return ("trainer settings", problem) if problem else None


_TRAINER_DEFAULTS = ("auto", "1", "auto", "32-true")  # trains on any machine: Lightning is not imported for it
_TRAINER_PROBLEMS: dict[tuple[str, ...], str | None] = {}


def _trainer_problem(trainer: dict[str, Any]) -> str | None:
    """Lightning's refusal of the trainer's accelerator/devices/strategy/precision on this machine
    (``stages.common.check_trainer``, which each trial calls first: ``trainer.devices=-1`` on a CPU), once
    per combination. Not for an accelerator named outright (``gpu``): a GPU spec validated on a laptop passes,
    as the paper-scale specs must; its trials say "no GPU" if it is run there."""
    if str(trainer["accelerator"]) not in ("auto", "cpu"):
        return None
    settings = tuple(str(trainer[k]) for k in ("accelerator", "devices", "strategy", "precision"))
    if settings == _TRAINER_DEFAULTS:
        return None
    if settings not in _TRAINER_PROBLEMS:
        from klear_lab.stages.common import check_trainer

        try:
            check_trainer({"trainer": trainer})
            _TRAINER_PROBLEMS[settings] = None
        except ConfigError as exc:
            _TRAINER_PROBLEMS[settings] = str(exc)
    return _TRAINER_PROBLEMS[settings]


def attention_problem(name: str) -> str | None:
    """Why transformers would refuse ``model.attn_implementation=name`` whatever the model (None: it knows the
    name), by its own registry: ``eager``, a registered attention (``sdpa``, ``flash_attention_2``,
    ``flex_attention``...) or a hub kernel (``org/repo``). Whether the model supports it, or its kernel's
    package is installed, the run itself finds out as it builds the model (``build_model``)."""
    if name in ("eager", "sdpa"):  # the usual ones: transformers (2 s to import) is not needed to know them
        return None
    try:
        from transformers.integrations.hub_kernels import is_kernel
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

        known = ["eager", *ALL_ATTENTION_FUNCTIONS.valid_keys()]
    except (ImportError, AttributeError):  # another transformers release: the run's own check answers
        return None
    if name in known or name.removeprefix("paged|") in known or is_kernel(name):  # `paged|sdpa`: deprecated, taken
        return None
    return (f"model.attn_implementation {name!r}: transformers knows no such attention; known: "
            f"{', '.join(sorted(known))}, or a hub kernel such as 'kernels-community/flash-attn'")
