"""Held-out problems that are also training problems: the held-out score would count what the run trained on.

The embedded world keeps the two apart by construction (``sources/base.is_heldout``); a data file listed under
both ``data.sources`` and ``data.eval_sources`` without an ``eval_path`` does not (its eval split is the same
file). Prompts are compared after collapsing whitespace: exact duplicates only. The paper's 9-gram
decontamination (``data.decontaminate_ngram``, ``klear_lab/data/decontaminate.py``) drops such training
records before the run; the warning then names only what it left (none, unless a prompt has no word or
is all template).
"""

from __future__ import annotations

import warnings

from klear_lab.data.records import Record


def trained_heldout(records: list[Record], eval_records: list[Record]) -> list[Record]:
    """The held-out records whose prompt (whitespace collapsed) is also a training record's."""
    trained = {" ".join(r.prompt.split()) for r in records}
    return [r for r in eval_records if " ".join(r.prompt.split()) in trained]


def warn_trained_heldout(records: list[Record], eval_records: list[Record]) -> None:
    """Warn, naming the count and the first such problem, when held-out problems were trained on."""
    if seen := trained_heldout(records, eval_records):
        warnings.warn(f"data.eval_sources: {len(seen)} of {len(eval_records)} held-out problems are also training "
                      f"prompts of data.sources (the first: {seen[0].uid!r} of {seen[0].source!r}), so the held-out "
                      "score counts problems the run trained on; give the file source an eval_path, or evaluate "
                      "on another file", UserWarning, stacklevel=2)
