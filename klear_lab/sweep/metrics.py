"""The metric names each run kind logs, so a sweep's objective is checked before any trial trains.

A trial reads its objective from the run's final metrics (or the last row of its ``metrics.csv``);
a name no run logs (``val/acx``) only failed once every trial had trained. The names below are
those the code logs, with where: ``<source>`` stands for a data source's name, ``<k>`` for a
difficulty level. A name added to the logging code belongs here too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from klear_lab.errors import did_you_mean

EVAL = ("val/acc", "val/acc_macro", "val/n", "val/pass_at_k", "val/samples", "val/<source>/acc",
        "val/<source>/samples", "val/<source>/pass_at_k", "val/level<k>/acc")
"""``EvalResult.metrics`` (klear_lab/eval/heldout.py): every evaluation of every kind."""
DATA = ("data/records", "data/correct_frac", "data/correct_known_frac", "data/mix_share/<source>",
        "data/kept_frac/<source>", "data/repeat_factor/<source>", "data/decontam_dropped",
        "data/decontam_dropped_from/<source>")
"""``builders.train_and_heldout`` (the data stats of a training run)."""
TRAINED = ("train/steps", "perf/train_seconds", "perf/torch_threads", "perf/world_size")
"""Added to the final metrics by stages/sft.py and stages/rl.py."""
SFT = ("train/loss", "train/grad_norm", "train/tokens", "perf/tokens_per_s",  # modules/sft.py
       "perf/packing_efficiency",
       "perf/eval_seconds",  # stages/sft.py
       "perf/packing_efficiency_data", "plan/total_steps", "plan/steps_per_epoch", "plan/examples",  # sft_plan
       "plan/dropped_too_long", "plan/tokens_per_step", "plan/params", "plan/dropped_no_response")
GAIN = ("val/acc_start", "val/acc_final", "val/gain", "val/gain_ci95_low", "val/gain_ci95_high", "val/acc_best",
        "val/acc_last5", "val/acc_drawdown", "val/<source>/acc_best", "val/<source>/acc_last5",
        "val/<source>/acc_drawdown")
"""``stages/gain.py:gain_summary`` (RL runs)."""
PHASES = ("generate", "score", "logprob", "update")  # an RL step's ``perf/time_<phase>_s``
RL_STEP = ("reward/mean", "reward/std", "reward/acc", "reward/format_rate", "rl/response_len_mean",
           "rl/response_len_max", "rl/truncated_frac", "rl/kept_group_frac", "rl/dropped_group_frac",
           "rl/trained_groups", "rl/updates_per_step", "rl/grad_norm", "rl/rollout_steps",
           "perf/generated_tokens_per_s", "perf/step_s", "data/dropped_long_prompts",
           *(f"perf/time_{phase}_s" for phase in PHASES))
"""``modules/rl_parts.py`` (``rollout_metrics``), ``modules/rl.py`` (``training_step``) and ``stages/rl.py``."""
PLACEHOLDER = re.compile(r"<[a-z]+>")
KINDS = ("sft", "rl", "eval")  # ``run.kind``


def rl_update_metrics() -> tuple[str, ...]:
    """The loss terms and clip statistics of an RL update: ``loss`` and ``pg_loss`` under ``train/``, the
    rest under ``rl/`` (``RLModule._update``). Read from the clip base and the step metrics, their homes."""
    from klear_lab.rl.clip.base import METRIC_KEYS
    from klear_lab.rl.step_metrics import LOSS_TERMS

    return tuple(f"train/{k}" if k in ("loss", "pg_loss") else f"rl/{k}" for k in (*LOSS_TERMS, *METRIC_KEYS))


def one_batch(metric: str) -> bool:
    """A training metric of one step's batch (``reward/acc``, ``rl/kept_group_frac``, ``train/loss``): a run's
    final value of it is its last step's, not the run's; a comparison table says so. Clip statistics
    (``rl/clip_frac`` and plugins' ``rl/...``) are too, except the run's totals."""
    totals = {"rl/rollout_steps", "data/dropped_long_prompts"}
    return metric not in totals and (metric.startswith(("reward/", "rl/")) or metric in (
        "train/loss", "train/pg_loss", "train/grad_norm", "perf/step_s",
        "perf/generated_tokens_per_s", *(f"perf/time_{phase}_s" for phase in PHASES)))


def clip_metric_names(nodes: list[dict] | None = None) -> set[str] | None:
    """``rl/<key>`` for the statistics the clip variants return (plugins' too), found by calling each
    registered one at its defaults, and each of ``nodes`` (``{name: ..., params}`` as trials configure
    them), on a tiny batch [2, 3] (``probe_clip``). None when a registered one cannot be called so at its
    defaults (its names are then known only once it runs); a configured node that cannot is a
    ``ConfigError``: every trial of its arm would fail in its first update. A plugin clip's
    ``ClipOutput.metrics`` may hold keys of its own."""
    from klear_lab.registry import CLIP
    from klear_lab.rl.clip.base import probe_clip

    names: set[str] = set()
    unknown = False
    for name in CLIP.names():
        try:
            names |= {f"rl/{k}" for k in probe_clip(CLIP.build({"name": name}), "rl.clip")}
        except Exception:  # noqa: BLE001 - not used by this sweep at its defaults: unknown, not an error here
            unknown = True
    for node in nodes or []:
        names |= {f"rl/{k}" for k in probe_clip(CLIP.build(node), f"rl.clip {dict(node)}")}
    return None if unknown else names


def logged_metrics(kind: str) -> tuple[str, ...]:
    """Names (with ``<source>``/``<k>`` placeholders) a ``run_experiment`` run of ``kind`` logs."""
    if kind == "sft":
        return (*EVAL, *DATA, *TRAINED, *SFT)
    if kind == "rl":
        return (*EVAL, *GAIN, *DATA, *TRAINED, *RL_STEP, *rl_update_metrics())
    if kind == "eval":
        return (*EVAL, "perf/eval_seconds", "perf/torch_threads")
    return ()


def is_logged(name: str, kind: str) -> bool:
    """Whether ``name`` is a metric runs of ``kind`` log (a placeholder matches one path segment)."""
    return any(_pattern(p).fullmatch(name) for p in logged_metrics(kind))


def unlogged_message(name: str, kind: str, extra: Iterable[str] = ()) -> str:
    """Why ``name`` is refused: a did-you-mean, and the names of its namespace (or all) that ``kind`` runs log.
    ``extra``: names these runs log besides :func:`logged_metrics` (a plugin clip's ``rl/<key>``), candidates
    too, so that ``rl/my_clip_fracc`` gets ``rl/my_clip_frac``."""
    builtin = logged_metrics(kind)
    names = (*builtin, *sorted(set(extra) - set(builtin)))
    others = [k for k in KINDS if k != kind and is_logged(name, k)]
    did = f" (only {'/'.join(others)} runs do)" if others else did_you_mean(name, names)
    prefix = name.split("/", 1)[0] + "/"
    same = [n for n in names if n.startswith(prefix)] if "/" in name else []
    shown = f" under {prefix}" if same else ""
    return f"{name!r} is not a metric {kind} runs log{did}; they log{shown}: {', '.join(same or names)}"


def _pattern(name: str) -> re.Pattern[str]:
    parts = PLACEHOLDER.split(name)
    return re.compile("[^/]+".join(re.escape(p) for p in parts))
