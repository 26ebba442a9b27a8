"""Runs hide Lightning's litlogger advert and its torch `_pytree` deprecation, and nothing else."""

from __future__ import annotations

import logging
import warnings

from lightning.pytorch.utilities.rank_zero import rank_zero_info

from klear_lab.stages.common import without_upstream_noise

TIP = "💡 Tip: For seamless cloud logging and experiment tracking, try installing [litlogger](...)"
PYTREE = "`isinstance(treespec, LeafSpec)` is deprecated, use `isinstance(treespec, TreeSpec)` instead."


def emit() -> list[str]:
    """Messages that reach a handler or the warnings record from the two upstream sources and two others."""
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    log = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    log.addHandler(handler)
    old_level, log.level = log.level, logging.INFO
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with without_upstream_noise():
                rank_zero_info(TIP)
                rank_zero_info("GPU available: False, used: False")
                warnings.warn(PYTREE, FutureWarning, stacklevel=1)
                warnings.warn("Found 3 module(s) in eval mode", UserWarning, stacklevel=1)
        seen += [str(w.message) for w in caught]
    finally:
        log.removeHandler(handler)
        log.setLevel(old_level)
    return seen


def test_only_the_two_upstream_messages_are_hidden():
    assert emit() == ["GPU available: False, used: False", "Found 3 module(s) in eval mode"]


def test_the_litlogger_filter_is_removed_afterwards():
    log = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    before = list(log.filters)
    with without_upstream_noise():
        assert len(log.filters) == len(before) + 1
    assert log.filters == before
