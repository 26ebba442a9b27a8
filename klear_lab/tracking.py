"""Run directories, identity (config hash, git commit), durable file writes and metrics CSV rows.

A run directory holds ``config.yaml`` (the resolved config, enough to reproduce the run with its
seed), ``run.json`` (identity and status), ``csv/metrics.csv``, ``checkpoints/``, ``model/`` (the
final HF checkpoint), ``wandb/`` and, only once the run completed, ``summary.json``. Its loggers:
:mod:`klear_lab.loggers`.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import csv
import hashlib
import json
import os
import re
import shutil
import time
import unicodedata
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from klear_lab.errors import ConfigError
from klear_lab.git_state import git_commit
from klear_lab.plugin_copies import kept_copy_name, kept_sources, write_kept_index
from klear_lab.plugins import ENTRY_POINT_GROUP, plugin_digests

IDENTITY_EXCLUDE = {("run", "seed"), ("run", "out_dir"), ("run", "name"), ("run", "tags"), ("run", "group"),
                    ("run", "job_type"), ("run", "notes"), ("run", "experiment"), ("trainer", "num_threads"),
                    ("trainer", "checkpoint_every"), ("rl", "logp_chunk_tokens")}  # the last: memory, not values


# Keys added after runs existed (by path; "*" = every item of a list), hashed only when set away from
# their value before (what the runs before them did), so that older runs keep their hash (a resume
# checks it; sweeps match retried trials by it).
ADDED_KEYS = {("rl", "max_prompt_tokens"): 0, ("rl", "lr_schedule_unit"): "update", ("rl", "max_kept_prompts"): 0,
              ("rl", "reward", "total_timeout_s"): None, ("eval", "code_reward", "total_timeout_s"): None,
              ("eval", "top_k"): 0, ("eval", "repetition_penalty"): 1.0, ("eval", "samples_per_source"): {},
              ("data", "sources", "*", "label"): None, ("data", "eval_sources", "*", "label"): None,
              ("rl", "reward", "record_limits"): False, ("eval", "code_reward", "record_limits"): False,
              ("rl", "reward", "process_per_test"): False, ("eval", "code_reward", "process_per_test"): False,
              ("data", "filter", "min_tests"): 0, ("data", "sources", "*", "shared_prompts"): False,
              ("data", "eval_sources", "*", "shared_prompts"): False, ("data", "mix", "select"): "random",
              ("data", "mix", "kcenter_dim"): 256, ("data", "decontaminate_ngram"): 0,
              # rounding to nearest before it, but no run here had bfloat16 weights (only the paper-scale configs)
              ("optim", "bf16_rounding"): "stochastic"}


def config_hash(cfg: dict[str, Any]) -> str:
    """Hash of what the run computes (seed and naming excluded): seeds of one arm share it."""
    return body_hash(hashed_body(cfg))


def body_hash(body: dict[str, Any]) -> str:
    """:func:`config_hash` of a config whose :func:`hashed_body` is ``body``."""
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()[:12]


def hashed_body(cfg: dict[str, Any]) -> dict[str, Any]:
    """What :func:`config_hash` hashes: the config without tracking, seed and naming, keys added later at
    their earlier value dropped, plugins as their code's digests."""
    body = copy.deepcopy({k: v for k, v in cfg.items() if k != "tracking"})
    for section, key in IDENTITY_EXCLUDE:
        body.get(section, {}).pop(key, None)
    for path, before in ADDED_KEYS.items():
        drop_if_unchanged(body, path, before)
    if body.get("plugins"):  # their code, not where it lies (configs without plugins keep their hash)
        body["plugins"] = plugin_digests(body["plugins"])
    return body


def drop_if_unchanged(node: Any, path: tuple[str, ...], before: Any) -> None:
    """Remove the key at ``path`` below ``node`` ("*": in every item of a list) where it holds ``before``."""
    name, rest = path[0], path[1:]
    if name == "*":
        for item in node if isinstance(node, list) else []:
            drop_if_unchanged(item, rest, before)
    elif not isinstance(node, dict):
        return
    elif rest:
        drop_if_unchanged(node.get(name), rest, before)
    elif node.get(name, before) == before:
        node.pop(name, None)


def component_tags(cfg: dict[str, Any]) -> list[str]:
    """``axis:name`` tags for the components a run uses, for W&B filtering."""
    tags = [f"kind:{cfg['run']['kind']}", f"mix:{cfg['data']['mix']['name']}",
            f"filter:{cfg['data']['filter']['name']}", f"seed:{cfg['run']['seed']}"]
    rl = cfg.get("rl")
    if cfg["run"]["kind"] == "rl" and rl:
        tags += [f"{axis}:{rl[axis]['name']}" for axis in ("clip", "aggregation", "advantage", "reward", "rollout")
                 if isinstance(rl.get(axis), dict)]
    return tags


def out_dir_of(cfg: dict[str, Any]) -> Path:
    """``run.out_dir`` as a path, ``~`` expanded (no shell expands it in a YAML file or a quoted override;
    Lightning and W&B do, so a literal ``./~`` split the run); the config keeps what the user wrote."""
    return Path(os.path.expanduser(str(cfg["run"]["out_dir"])))


def run_dir_name(cfg: dict[str, Any], stamp: str) -> str:
    """``<name>-<stamp>-<hash>-s<seed>``: what :func:`create_run_dir` names a run started at ``stamp``."""
    return dir_name(str(cfg["run"]["name"]), stamp, config_hash(cfg)[:6], cfg["run"]["seed"])


def dir_name(name: str, stamp: str, short_hash: str, seed: int) -> str:
    """A run directory's name from its parts (:func:`run_dir_name`)."""
    return f"{safe_name(name)}-{stamp}-{short_hash}-s{seed}"


RUN_DIR_NAME_MAX = 255  # bytes in one file name on most file systems (ext4, xfs, btrfs, tmpfs)


def longest_run_dir_name(name: str, seed: int) -> str:
    """The longest name :func:`create_run_dir` may give a run named ``name`` with ``seed`` (any config hash
    is 6 characters; ``-99``: a later run started in the same second): what checks of its length measure."""
    return dir_name(name, "20000101-000000", "abcdef", seed) + "-99"


def safe_name(name: str) -> str:
    """``name`` as a directory name and W&B run id may hold it: letters (any script: ``ünï`` stays, it became
    ``-n-``), digits and ``_ . + = -`` kept, anything else a ``-`` (W&B ids refuse / : ; , # ? ', a shell
    needs spaces quoted). NFC first, so an accent typed as a combining mark stays with its letter."""
    return re.sub(r"[^\w.+=-]", "-", unicodedata.normalize("NFC", name)) or "run"


def create_run_dir(cfg: dict[str, Any]) -> Path:
    """A fresh, uniquely named directory under ``run.out_dir``: ``<name>-<time>-<hash>-s<seed>``."""
    base = out_dir_of(cfg) / run_dir_name(cfg, time.strftime("%Y%m%d-%H%M%S"))
    path, i = base, 1
    while True:
        try:
            path.mkdir(parents=True)
            return path
        except FileExistsError:  # this name is taken (by another run starting this second, say)
            path, i = Path(f"{base}-{i}"), i + 1
        except OSError as exc:
            raise ConfigError(f"run.out_dir: cannot create the run directory {path}: {exc.strerror}") from None


def write_config(run_dir: Path, cfg: dict[str, Any]) -> None:
    """``config.yaml``, the resolved config the run computes from (written whole or not at all), and a
    copy of each ``.py`` plugin's code as it was, and of the helper modules beside it that it imports
    (``plugins/NAME-SHA8.py``): the saved config names the original file, which may change later. Which copy
    is which plugin's goes in ``plugins/index.json`` (two plugins of one file name in two folders)."""
    index = {}
    for plugin in cfg.get("plugins") or []:
        if str(plugin).endswith(".py") and Path(plugin).is_file():
            index[str(plugin)] = kept_copy_name(Path(plugin))
            for source in kept_sources(Path(plugin)):
                try:
                    copy = run_dir / "plugins" / kept_copy_name(source)
                    copy.parent.mkdir(exist_ok=True)
                    if copy.exists() and copy.samefile(source):  # a resume on the run's own kept copy
                        continue
                    atomic_write(copy, lambda tmp, src=source: shutil.copyfile(src, tmp))
                except OSError as exc:  # a record of the code, not needed to run: say so and go on
                    warnings.warn(f"could not keep a copy of plugin code {source}: {exc}", stacklevel=2)
    if index:
        write_kept_index(run_dir / "plugins", index)
    from klear_lab.config.yaml_io import dump_yaml

    text = dump_yaml(cfg)
    atomic_write(run_dir / "config.yaml", lambda tmp: tmp.write_text(text))


def saved_config(run_dir: Path) -> dict[str, Any]:
    return yaml.safe_load((run_dir / "config.yaml").read_text())


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write atomically so a reader never sees half a file."""
    atomic_write(path, lambda tmp: tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str)))


def atomic_write(path: Path, write: Any) -> None:
    """``write(tmp)`` then rename onto ``path``: readers never see half a file, a failure leaves the old one.
    The data reaches the disk before the rename (else a host crash could leave the new name on an empty file)."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}{path.suffix}")
    try:
        write(tmp)
        replace_durably(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def replace_durably(tmp: Path, path: Path) -> None:
    """``os.replace(tmp, path)`` after ``tmp``'s data is on disk, then the directory's entry (best-effort:
    some filesystems refuse to sync a directory)."""
    _fsync(tmp)
    os.replace(tmp, path)
    with contextlib.suppress(OSError):
        _fsync(path.parent)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def row_metrics(row: dict[str, str]) -> tuple[int | None, dict[str, float]]:
    """A metrics CSV row as ``(step, {metric: value})`` (its empty cells left out)."""
    step = row.get("step")
    return (int(float(step)) if step else None), {k: _number(v) for k, v in row.items() if k != "step" and v != ""}


def _number(cell: str) -> int | float:
    """A CSV cell as Lightning wrote it: ``epoch`` ``0`` stays an int (not ``0.0``) when a resumed run
    writes its kept rows back."""
    try:
        return int(cell)
    except ValueError:
        return float(cell)


def csv_rows(path: Path) -> list[dict[str, str]]:
    """The rows of a metrics CSV, without a line that a kill cut short (missing cells, or not numbers)."""
    return csv_table(path)[1]


def csv_table(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    """A metrics CSV's header and its whole rows (:func:`csv_rows`), in one read."""
    def whole(row: dict) -> bool:
        try:
            return None not in row and all(v == "" or isinstance(float(v), float) for v in row.values())
        except (TypeError, ValueError):  # a missing cell is None; half a number may not parse
            return False

    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        rows = [row for row in reader if whole(row)]
        return list(reader.fieldnames or []), rows


RUN_ID_CHARS = 40
_DIR_SUFFIX = re.compile(r"-\d{8}-\d{6}-\w{6}-s\d+(-\d+)?$")  # what create_run_dir appends to the name


def run_id_of(run_dir: Path) -> str:
    """The W&B run id of ``run_dir``: its name, cut to ``RUN_ID_CHARS`` at the end of the run's name so that
    the time, hash and seed stay (cutting the front made "quickstart-sft-eval-..." "start-sft-eval-..."),
    with 4 hex digits of the whole name so that names cut to the same start stay apart."""
    name = run_dir.name
    suffix = _DIR_SUFFIX.search(name)
    if len(name) > RUN_ID_CHARS and suffix and len(suffix.group()) + 6 < RUN_ID_CHARS:
        digest = hashlib.blake2b(name.encode(), digest_size=2).hexdigest()
        name = f"{name[:RUN_ID_CHARS - len(suffix.group()) - 5]}-{digest}{suffix.group()}"
    return name[-RUN_ID_CHARS:].replace(".", "-")


LAUNCH_COMMAND: contextvars.ContextVar[tuple[str, ...] | None] = contextvars.ContextVar("launch_command", default=None)
"""The ``klear-lab`` command line that starts this run (set by the CLI; a sweep's trials and notebooks have none)."""


@contextlib.contextmanager
def launched_by(command: list[str]) -> Iterator[None]:
    """Record ``command`` (``klear-lab train EXP KEY=VALUE ...``, as typed) in the ``run.json`` of the run
    started within: what the config alone does not say, which overrides were given."""
    token = LAUNCH_COMMAND.set(tuple(command))
    try:
        yield
    finally:
        LAUNCH_COMMAND.reset(token)


def identity_of(cfg: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """What names a run: ``git_commits`` gets one commit per attempt (:func:`klear_lab.attempts.saved_identity`);
    ``command``, where the CLI started it (:func:`launched_by`)."""
    run, commit, command = cfg["run"], git_commit(), LAUNCH_COMMAND.get()
    return {
        "run_id": run_id_of(run_dir),
        "run_dir": str(run_dir), "config_hash": config_hash(cfg), "git_commit": commit, "git_commits": [commit],
        "group": run["group"] or run["name"], "job_type": run["job_type"] or run["kind"],
        "tags": [*run["tags"], *component_tags(cfg)], "seed": run["seed"], "experiment": run["experiment"],
        "software": [software_versions()], "work_dir": str(Path.cwd()),  # relative data paths are read from it
        **({"command": list(command)} if command else {}),
    }


SOFTWARE = ("klear-lab", "torch", "lightning", "transformers", "tokenizers", "datasets", "vllm", "math-verify",
            "wandb", "optuna", "omegaconf", *(RECORDED_LATER := ("sympy", "latex2sympy2_extended", "numpy")))
"""The distributions whose versions a run records: its numbers (kernels, samplers, parsers) depend on them;
math-verify's verdicts on sympy and latex2sympy2_extended. ``RECORDED_LATER``: not in runs from before the
forty-sixth session (numpy comes with torch, so a record without it is one of those)."""


def software_versions() -> dict[str, str]:
    """Python's version, those of :data:`SOFTWARE` installed, and of each installed plugin package (a
    ``klear_lab.plugins`` entry point, as ``plugin:NAME``; unlike a plugin file, its code is not hashed):
    a run's saved config and seed reproduce it with these."""
    import importlib.metadata as metadata
    import platform

    versions = {"python": platform.python_version()}
    for name in SOFTWARE:
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions[name] = metadata.version(name)
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.dist is not None:
            versions[f"plugin:{ep.dist.name}"] = ep.dist.version
    return versions
