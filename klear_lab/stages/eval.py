"""The eval stage (``run.kind: eval``): score a trained model on the held-out sets, nothing else.

The paper evaluates its checkpoints offline with avg@k (k samples per problem at temperature 0.6,
top_p 0.95); ``klear-lab eval RUN_DIR eval.samples=64 eval.temperature=0.6 eval.top_p=0.95`` does
that for a finished run (its saved config and final model), or ``model.name_or_path`` names any HF
checkpoint. It is a run like the others: a run directory with the resolved config, ``summary.json``,
a W&B run, plus ``eval_samples.jsonl`` (every completion and verdict, for error analysis).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from klear_lab import builders
from klear_lab.data.records import Record
from klear_lab.errors import ConfigError, DataError
from klear_lab.eval.heldout import EvalResult, Sampling, evaluate
from klear_lab.stages.common import finish_loggers, log_samples_table
from klear_lab.tracking import atomic_write, make_loggers


@dataclass
class EvalStage:
    cfg: dict[str, Any]
    model: Any
    tokenizer: Any
    records: list[Record]
    rewards: dict[str, Any]
    sampling: Sampling

    def execute(self, run_dir: Path, identity: dict[str, Any], callbacks: list) -> tuple[dict[str, float], Path | None]:
        cfg = self.cfg
        loggers = make_loggers(cfg, run_dir, identity)
        start = time.perf_counter()
        result = evaluate(self.model, self.tokenizer, self.records, self.rewards, cfg["eval"]["max_new_tokens"],
                          cfg["eval"]["batch_size"], self.sampling)
        metrics = {**result.metrics("val"), "perf/eval_seconds": time.perf_counter() - start,
                   "perf/torch_threads": float(torch.get_num_threads())}
        write_samples(run_dir / "eval_samples.jsonl", result)
        for logger in loggers:
            logger.log_hyperparams({})
            logger.log_metrics(metrics, step=0)
        log_samples_table(loggers, result, cfg["tracking"]["wandb"]["log_samples"], "val/samples")
        return metrics, finish_loggers(loggers, metrics)


def write_samples(path: Path, result: EvalResult) -> None:
    """One JSON line per problem: uid, source, level, prompt, answer, completions, verdicts, score."""
    lines = [json.dumps({"uid": r.uid, "source": r.source, "level": r.difficulty, "prompt": r.prompt,
                         "answer": r.answer, "completions": c, "verdicts": v, "score": s})
             for r, c, v, s in zip(result.records, result.completions, result.verdicts, result.scores)]
    atomic_write(path, lambda tmp: tmp.write_text("".join(line + "\n" for line in lines)))


def eval_config(target: str | Path, overrides: list[str] | None = None) -> dict[str, Any]:
    """The config of ``klear-lab eval TARGET [key=value ...]``.

    ``TARGET`` is a finished run directory (its saved config, and its final model as
    ``model.name_or_path``) or an experiment file (the model it names). ``overrides`` come last, so
    ``eval.samples=64`` or another ``data.eval_sources`` apply to either.

    Raises:
        ConfigError: ``TARGET`` is neither, or the run directory has no final model.
    """
    from klear_lab.config.compose import compose, dotlist_layer

    path = Path(target)
    if path.is_dir():
        saved = path / "config.yaml"
        if not saved.is_file() or not (path / "model" / "config.json").is_file():
            raise ConfigError(f"{path}: not a finished run directory (needs config.yaml and model/); give a "
                              "run directory or an experiment file")
        from klear_lab.config.compose import load_yaml

        experiment = saved
        name = (load_yaml(saved).get("run") or {}).get("name") or path.name
        layer = {"run": {"kind": "eval", "name": f"{name}-eval"},
                 "model": {"name_or_path": str(path.resolve()), "init_from": None}}
    elif path.is_file():
        experiment, layer = path, {"run": {"kind": "eval"}}
    else:
        raise ConfigError(f"{path}: no such run directory or experiment file")
    return compose(experiment, None, [("klear-lab eval", layer), *([dotlist_layer(overrides)] if overrides else [])])


def prepare_eval(cfg: dict[str, Any]) -> EvalStage:
    """Everything that may fail on bad input happens here, before the run directory exists."""
    m = cfg["model"]
    if not m["name_or_path"] and not m["init_from"]:
        raise ConfigError("model.name_or_path: an eval run needs a trained model: a run directory or an HF "
                          "checkpoint (or model.init_from: EXPERIMENT.yaml); `klear-lab eval RUN_DIR` sets it")
    builders.set_threads(cfg)
    records = builders.build_eval_records(cfg)
    if not records:
        raise DataError("data.eval_sources: an eval run needs held-out problems; none were built")
    builders.resolve_init_from(cfg)
    tokenizer, model = builders.build_tokenizer_and_model(cfg, [])
    model = model.to(_device(cfg))
    return EvalStage(cfg, model, tokenizer, records, builders.build_eval_rewards(cfg), builders.eval_sampling(cfg))


def _device(cfg: dict[str, Any]) -> torch.device:
    """One device: CUDA when ``trainer.accelerator`` allows it and one is present, else CPU."""
    wants_gpu = cfg["trainer"]["accelerator"] in ("auto", "gpu", "cuda")
    return torch.device("cuda" if wants_gpu and torch.cuda.is_available() else "cpu")
