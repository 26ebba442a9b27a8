"""Reading a stopped run's ``checkpoints/last.ckpt`` for :mod:`klear_lab.resume`: what a resume needs of it in
one load, and a file that cannot load (empty, cut short, overwritten) as a :class:`ConfigError` naming it and
what to do, in a few words instead of a torch traceback. Kept apart from ``resume.py`` (the names other modules
import, :func:`klear_lab.resume.checkpoint_log_step` among them), which stays short.
"""

from __future__ import annotations

from pathlib import Path

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
