"""The eval stage (``run.kind: eval``): score a trained model on the held-out sets, nothing else.

The paper evaluates its checkpoints offline with avg@k (k samples per problem at temperature 0.6,
top_p 0.95; its released script adds top_k 20 and repetition penalty 1.05);
``klear-lab eval RUN_DIR eval.samples=64 eval.temperature=0.6 eval.top_p=0.95 eval.top_k=20
eval.repetition_penalty=1.05`` does that for a finished run (its saved config and final model), or
``model.name_or_path`` names any HF checkpoint. It is a run like the others: a run directory with
the resolved config, ``summary.json``, a W&B run, plus ``eval_samples.jsonl`` (every completion and
verdict, for error analysis).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from klear_lab import builders
from klear_lab.build_model import build_tokenizer_and_model
from klear_lab.data.records import Record, data_digests
from klear_lab.distributed import recorded_error
from klear_lab.errors import ConfigError, DataError
from klear_lab.eval.engine import EvalEngine
from klear_lab.eval.heldout import Sampling, evaluate
from klear_lab.loggers import make_loggers
from klear_lab.run_owner import live_status
from klear_lab.stages.common import check_wandb_login, finish_loggers, log_samples_table, write_samples
from klear_lab.tracking import RUN_DIR_NAME_MAX, longest_run_dir_name, run_id_of


@dataclass
class EvalStage:
    cfg: dict[str, Any]
    model: Any
    tokenizer: Any
    records: list[Record]
    rewards: dict[str, Any]
    sampling: Sampling
    engine: EvalEngine | None = None
    data: dict[str, str] = field(default_factory=dict)  # records_digest of the held-out records

    def execute(self, run_dir: Path, identity: dict[str, Any], callbacks: list) -> tuple[dict[str, float], Path | None]:
        cfg = self.cfg
        loggers = make_loggers(cfg, run_dir, identity)
        for logger in loggers:  # starts the W&B run now: a refusal there costs no decoding
            logger.log_hyperparams({})
        start = time.perf_counter()
        try:
            result = evaluate(self.model, self.tokenizer, self.records, self.rewards, cfg["eval"]["max_new_tokens"],
                              cfg["eval"]["batch_size"], self.sampling, self.engine)
        finally:
            if self.engine is not None:
                self.engine.close()
        metrics = {**result.metrics("val"), "perf/eval_seconds": time.perf_counter() - start,
                   "perf/torch_threads": float(torch.get_num_threads())}
        write_samples(run_dir / "eval_samples.jsonl", result)
        for logger in loggers:
            logger.log_metrics(metrics, step=0)
        log_samples_table(loggers, result, cfg["tracking"]["wandb"]["log_samples"], "val/samples")
        return metrics, finish_loggers(loggers, metrics)


# What an evaluation reads: an override of anything else (optim.lr, sft.epochs...) would be accepted and
# change nothing but the saved config and the W&B title of a rescore.
EVAL_KEYS = ("eval", "data.eval_sources", "data.world_seed", "run.name", "run.out_dir", "run.seed", "run.tags",
             "run.group", "run.job_type", "run.notes", "tracking", "trainer.accelerator", "trainer.num_threads",
             "plugins", "rl.rollout", "model.name_or_path", "model.dtype", "model.attn_implementation")
# ... but not these of them: training's own (an evaluation is one process on one device, and writes no checkpoint)
TRAINING_ONLY = {"eval.every_n_steps": "is the interval of evaluations during training"}


def check_eval_overrides(overrides: list[str], label: str = "command line") -> None:
    """Raise ``ConfigError`` for an override that is not ``key=value`` (said first: ``notkv`` was called a key
    an evaluation does not read) or that an evaluation would not read; ``label`` says where they were given."""
    from klear_lab.config.layers import check_override_form, override_key

    for item in overrides:
        check_override_form(item, label)
        key = override_key(item)
        if key in TRAINING_ONLY:
            raise ConfigError(f"{item!r}: {key} does not change an evaluation: it {TRAINING_ONLY[key]}")
        if not any(key == k or key.startswith(f"{k}.") for k in EVAL_KEYS):
            raise ConfigError(f"{item!r}: {key} does not change an evaluation (it is not read when scoring); an "
                              f"evaluation takes {', '.join(f'{k}...' for k in EVAL_KEYS[:3])}, run naming and "
                              "seed, tracking, trainer.accelerator and num_threads (one process on one device), "
                              "plugins, rl.rollout (eval.engine: rollout) and the model's name_or_path, dtype "
                              "and attention")


def check_rollout_overrides(cfg: dict[str, Any], overrides: list[str]) -> None:
    """An ``rl.rollout`` override is read by an evaluation only through ``eval.engine: rollout``: with the
    ``generate`` engine it changed nothing but the config's hash."""
    from klear_lab.config.layers import override_key

    if cfg["eval"]["engine"] == "rollout":
        return
    for item in overrides:
        if override_key(item).split(".")[:2] == ["rl", "rollout"]:
            raise ConfigError(f"{item!r}: rl.rollout does not change this evaluation: its eval.engine is "
                              f"{cfg['eval']['engine']!r}, which decodes with transformers; set eval.engine=rollout "
                              "to evaluate on the rollout engine")


def eval_config(target: str | Path, overrides: list[str] | None = None) -> dict[str, Any]:
    """The config of ``klear-lab eval TARGET [key=value ...]``.

    ``TARGET`` is a finished run directory (its saved config, and its final model as
    ``model.name_or_path``) or an experiment file (the model it names). ``overrides`` come last, so
    ``eval.samples=64`` or another ``data.eval_sources`` apply to either; keys an evaluation does
    not read are refused (:data:`EVAL_KEYS`).

    Raises:
        ConfigError: ``TARGET`` is neither, the run directory has no final model, or an override
            names a key an evaluation does not read.
    """
    from klear_lab.config.compose import compose
    from klear_lab.config.layers import dotlist_layer

    check_eval_overrides(overrides or [])
    path = Path(target)
    if path.is_dir():
        experiment, layer = saved_run(path)
    elif path.is_file():
        run_layer = _eval_run(path, path.stem)[1]
        run_layer.pop("group")  # a base: file may set it: the composed experiment's own group stays
        experiment, layer = path, {"run": run_layer}
    else:
        raise ConfigError(f"{path}: no such run directory or experiment file")
    layer["trainer"] = {"devices": 1, "strategy": "auto"}  # one process, one device (a DDP run's config says more)
    cfg = compose(experiment, None, [("klear-lab eval", layer), *([dotlist_layer(overrides)] if overrides else [])])
    check_rollout_overrides(cfg, overrides or [])
    return cfg


def unscorable(path: Path) -> str | None:
    """Why ``path`` is not a completed run directory with a final model, or None when it is."""
    saved, status = path / "config.yaml", path / "run.json"
    if not saved.is_file() or not status.is_file():
        return (f"{path}: not a run directory (needs config.yaml and run.json); give a run directory or an "
                "experiment file")
    try:
        record = json.loads(status.read_text())
        state, error = live_status(record), recorded_error(path, record)  # as `klear-lab runs` shows it
        if state == "unknown" and record.get("host"):  # recorded running on another machine
            error = f"running on {record['host']} (pid {record.get('pid')}): not checked from here"
    except (ValueError, AttributeError):
        state, error = "unreadable", None
    if state != "completed":  # a stopped run has no final model: say so, and how to finish it
        how = _how_to_continue(path)
        return (f"{status}: status is {state!r}{f' ({error})' if error else ''}: only a completed run has a "
                f"final model to score{how}")
    if not (path / "model" / "config.json").is_file():
        saved = _saved_run(path)
        if saved.get("kind") == "eval":  # an eval run keeps no model: it scored another run's, or a hub model
            scored = saved.get("model")
            a_run = scored and (Path(scored) / "run.json").is_file()
            again = (f"score that again with `klear-lab eval {scored}`" if a_run
                     else "score it again with the experiment file that names it (`klear-lab eval EXPERIMENT.yaml`)")
            return f"{path}: an eval run, with no model of its own: it scored {scored or 'a model'}; {again}"
        return f"{path}: the run completed but its final model (model/) is missing"
    return None


def _saved_run(path: Path) -> dict[str, str | None]:
    """``kind`` and ``model`` (``run.kind``, ``model.name_or_path``) of the saved config in ``path`` ({} when
    unreadable)."""
    import yaml

    try:
        saved = yaml.safe_load((path / "config.yaml").read_text()) or {}
        return {"kind": saved.get("run", {}).get("kind"), "model": saved.get("model", {}).get("name_or_path")}
    except (OSError, yaml.YAMLError, AttributeError):
        return {}


def _how_to_continue(path: Path) -> str:
    """What continues the stopped run in ``path``, as ``klear-lab resume`` says it: for a sweep's trial, which it
    refuses, what it says instead (its sweep, or why nothing); `` (`klear-lab resume RUN` continues it)`` when it
    would continue the run with its saved config; "" when it would not."""
    import yaml

    from klear_lab.resume import check_resumable
    from klear_lab.resume_trial import trial_refusal
    from klear_lab.run_list import sweep_trial

    try:
        if (sweep := sweep_trial(path.resolve())) is not None:
            return f"; {trial_refusal(path, sweep, resuming=False)}"
        check_resumable(path, yaml.safe_load((path / "config.yaml").read_text()))
    except Exception:  # noqa: BLE001 - only whether to suggest it
        return ""
    return f" (`klear-lab resume {path}` continues it)"


def saved_run(path: Path) -> tuple[Path, dict[str, Any]]:
    """A completed run directory's saved config and the layer that turns it into its evaluation.

    The eval run keeps the run's W&B group (a sweep's, say) with job type ``eval`` and a tag naming
    the run it scores, and is written beside that run unless ``run.out_dir`` says otherwise.
    """
    problem = unscorable(path)
    if problem:
        raise ConfigError(problem)
    saved = path / "config.yaml"
    run, layer = _eval_run(saved, path.name)
    scored = json.loads((path / "run.json").read_text()).get("run_id") or run_id_of(path)  # its W&B run id
    layer.update(out_dir=str(path.resolve().parent), tags=["eval", f"evaluates:{scored}", *(run.get("tags") or [])])
    return saved, {"run": layer, "model": {"name_or_path": str(path.resolve()), "init_from": None}}


def _eval_run(config_file: Path, fallback_name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the file's ``run`` section, the ``run`` layer of its evaluation: kind, ``<name>-eval``, job type, and
    the scored run's W&B group: that run's, else its name, as ``identity_of`` gives it)."""
    from klear_lab.config.yaml_io import load_yaml

    run = load_yaml(config_file).get("run") or {}
    name = run.get("name") or fallback_name
    eval_name = fitting_name(str(name), "-eval", run.get("seed") if isinstance(run.get("seed"), int) else 0)
    return run, {"kind": "eval", "name": eval_name, "job_type": "eval", "group": run.get("group") or name}


def fitting_name(name: str, suffix: str, seed: int) -> str:
    """``name + suffix``, ``name`` cut by whole characters so that its run directory fits in a file name. A
    run named at the limit (222-226 bytes) was scored by ``klear-lab eval`` (and a sweep's ``--rescore``) only
    to be refused for the ``<name>-eval`` the user never typed; the eval run's tag and group still name it."""
    while name and len(longest_run_dir_name(name + suffix, seed).encode()) > RUN_DIR_NAME_MAX:
        name = name[:-1]
    return name + suffix


def prepare_eval(cfg: dict[str, Any]) -> EvalStage:
    """Everything that may fail on bad input happens here, before the run directory exists."""
    check_eval_model(cfg)
    check_wandb_login(cfg)
    device = _device(cfg)
    builders.set_threads(cfg)
    records = builders.build_eval_records(cfg)
    if not records:
        raise DataError("data.eval_sources: an eval run needs held-out problems; none were built")
    digests = data_digests(None, records)
    warn_if_other_heldout(cfg, digests["eval"])
    sampling = builders.eval_sampling(cfg, records)
    engine = builders.eval_engine(cfg)  # not started: a broken engine is refused before the model loads
    tokenizer, model = build_tokenizer_and_model(cfg, [])
    model = model.to(device)
    return EvalStage(cfg, model, tokenizer, records, builders.build_eval_rewards(cfg), sampling, engine, digests)


def warn_if_other_heldout(cfg: dict[str, Any], now: str) -> None:
    """Warn (not refuse) when the run being scored (``model.name_or_path``, a run directory) was evaluated on
    the same held-out sources but other records than ``now`` (the digest of those read here; ``run.json``'s
    ``data.eval``): a held-out file edited since, or read from another directory, under the same config, so the
    scores are not comparable. Other sources given on purpose (``data.eval_sources=...``) are not warned about."""
    import sys

    import yaml

    if not cfg["model"]["name_or_path"]:
        return
    scored = Path(str(cfg["model"]["name_or_path"]))
    try:
        then = (json.loads((scored / "run.json").read_text()).get("data") or {}).get("eval")
        data = yaml.safe_load((scored / "config.yaml").read_text())["data"]
        same_sources = all(data.get(key) == cfg["data"].get(key) for key in ("eval_sources", "world_seed"))
    except (OSError, ValueError, KeyError, TypeError, AttributeError, yaml.YAMLError):
        return  # a hub model, or a run from before the digests: nothing to compare with
    if then and then != now and same_sources:
        print(f"warning: evaluating {scored} on other held-out records than it was evaluated on (data.eval_sources: "
              f"{then} then, {now} now): the files its config names hold other data now, or are read from another "
              "directory; this evaluation's val/acc is not comparable with the run's", file=sys.stderr)


def check_eval_model(cfg: dict[str, Any]) -> None:
    """An eval run scores ``model.name_or_path``; without one (an SFT experiment, or an RL one's
    ``model.init_from``) there is no trained model to score, only a fresh or starting one. Called by the
    run and by ``--dry-run``, so the plan is refused as the run is."""
    if not cfg["model"]["name_or_path"]:
        raise ConfigError("model.name_or_path: an eval run scores a trained model: give a run directory "
                          "(`klear-lab eval RUN_DIR`) or model.name_or_path=RUN_DIR_or_HF_CHECKPOINT")


def _device(cfg: dict[str, Any]) -> torch.device:
    """One device: CUDA for ``trainer.accelerator`` gpu/cuda (required) or auto (when present), else CPU."""
    accelerator, cuda = cfg["trainer"]["accelerator"], torch.cuda.is_available()
    if accelerator in ("gpu", "cuda") and not cuda:
        raise ConfigError(f"trainer.accelerator is {accelerator!r} but no CUDA device is visible; "
                          "set trainer.accelerator=cpu (or auto) to evaluate on the CPU")
    return torch.device("cuda" if cuda and accelerator in ("auto", "gpu", "cuda") else "cpu")
