"""Reading a stopped run's ``checkpoints/last.ckpt`` for :mod:`klear_lab.resume`: what a resume needs of it in
one load; the config the run hashed at its start, to name what a refused resume changed; and a file that cannot
load (empty, cut short, overwritten) as a :class:`ConfigError` naming it and what to do, in a few words instead
of a torch traceback. Kept apart from ``resume.py`` (the names other modules import,
:func:`klear_lab.resume.checkpoint_log_step` among them), which stays short.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from klear_lab.errors import ConfigError


def checkpoint_marks(ckpt: Path) -> tuple[int, bool]:
    """What a resume reads of ``ckpt``, in one load: its logging step
    (:func:`klear_lab.resume.checkpoint_log_step`) and whether its run logs evaluations at the updates done
    (``checkpointing.EVAL_ROWS``; not a checkpoint of an older version, see :class:`klear_lab.resume.Resumable`).

    Raises:
        ConfigError: ``ckpt`` cannot be read, or is not a checkpoint Lightning wrote (empty, cut short by a
            full disk or a copy, overwritten), naming it and what to do instead of a torch traceback.
    """
    import pickle

    import torch

    from klear_lab.checkpointing import EVAL_ROWS, EVAL_ROWS_KEY, POSITION_KEY

    advice = (f"the run cannot continue from it: put back an intact copy of the file, or start a new run: "
              f"klear-lab train {ckpt.parent.parent / 'config.yaml'}")
    try:
        state = torch.load(ckpt, map_location="cpu", mmap=True, weights_only=True)
        step = int(state["loops"]["fit_loop"]["epoch_loop.state_dict"]["_batches_that_stepped"])
        return step, (state.get(POSITION_KEY) or {}).get(EVAL_ROWS_KEY) == EVAL_ROWS
    except (PermissionError, FileNotFoundError, IsADirectoryError) as exc:  # the file itself may be fine
        raise ConfigError(f"{ckpt}: cannot read the checkpoint ({exc.strerror or exc}); {advice}") from None
    except (OSError, RuntimeError, ValueError, EOFError, pickle.UnpicklingError, KeyError, IndexError,
            TypeError) as exc:  # OSError: a zip reader's EINVAL on a file cut short; EIO, the disk
        raise ConfigError(f"{ckpt}: cannot load the checkpoint (corrupt or truncated: {_load_failure(ckpt, exc)}); "
                          f"{advice}") from None


def _load_failure(ckpt: Path, exc: BaseException) -> str:
    """What is wrong with ``ckpt`` in a few words (torch's messages run to several sentences of advice)."""
    if ckpt.stat().st_size == 0:
        return "the file is empty"
    if isinstance(exc, (KeyError, IndexError, TypeError)):
        return f"no Lightning loop state in it ({type(exc).__name__}: {exc})"
    if isinstance(exc, OSError):
        return f"it does not read as a zip archive ({exc.strerror or exc})"
    text = str(exc).strip()
    if text.startswith("mmap can only be used with files saved with"):  # not a zip archive at all
        return "not a zip archive as torch.save writes"
    if "WeightsUnpickler error: " in text:  # objects other than tensors and plain values: not what Lightning wrote
        text = "not a checkpoint Lightning wrote: " + text.partition("WeightsUnpickler error: ")[2]
    text = text.partition("\n")[0]
    text = text.partition(". ")[0].rstrip(".") or type(exc).__name__
    return text if len(text) <= 160 else text[:157] + "..."


def changes_since_start(ckpt: Path, resolved: dict[str, Any], started_hash: str) -> str:
    """The keys of ``resolved`` whose values differ from what the run hashed at its start (``started_hash``),
    as ``ckpt`` recorded it (``key: old -> new; ...``); "" without that record (an older version's checkpoint,
    one that cannot load) or when only what is not in the config differs."""
    from klear_lab.tracking import body_hash, hashed_body

    started = started_config(ckpt)
    if started is None or body_hash(started) != started_hash:  # not the config this run's hash was of
        return ""
    return config_changes(started, json.loads(json.dumps(hashed_body(resolved), sort_keys=True, default=str)))


def started_config(ckpt: Path) -> dict[str, Any] | None:
    """What the run's config hash hashed when ``ckpt`` was written (``tracking.hashed_body``), or None: a
    checkpoint of an older version, or one that cannot be loaded (:func:`checkpoint_marks` says why)."""
    import torch

    from klear_lab.checkpointing import CONFIG_BODY_KEY, POSITION_KEY

    try:
        state = torch.load(ckpt, map_location="cpu", mmap=True, weights_only=True)
        return json.loads((state.get(POSITION_KEY) or {}).get(CONFIG_BODY_KEY) or "null")
    except Exception:  # noqa: BLE001 - only a hint for an error already being raised
        return None


def config_changes(before: dict[str, Any], after: dict[str, Any], limit: int = 5) -> str:
    """``key: old -> new`` for each leaf of two configs that differs (dotted keys, a list of mappings item by
    item; a key only one has: ``(unset)``), at most ``limit`` of them and a count of the rest; "" when none
    differ."""
    from klear_lab.config.flat import changed_keys, cut_pair, flatten

    changed = ["{}: {} -> {}".format(key, *cut_pair(was, now, 80))
               for key, was, now in changed_keys(flatten(before), flatten(after))]
    more = f"; and {len(changed) - limit} more" if len(changed) > limit else ""
    return "; ".join(changed[:limit]) + more
