"""A sweep's progress line after each trial: trials finished of the whole, and a rough time left."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime

import optuna
from optuna.trial import TrialState

from klear_lab.sweep.grid import canonical_point

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


@dataclass
class Progress:
    """``total``: grid points x seeds (or ``n_trials``); ``workers``: parallel trials in this process.

    The time left is the mean duration of the trials this process finished, times the trials left,
    over the workers: rough (trials differ; workers joined from elsewhere are not counted).
    """

    total: int
    workers: int
    replaces_failures: bool = False  # tpe/random: a failed trial is replaced by a new one in the same run
    durations: list[float] = field(default_factory=list)
    failed: int = 0  # failed here: not run again until the sweep is rerun
    points: frozenset[str] | None = None  # a grid's point keys: finished trials of points dropped since don't count
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _shown: int = 0  # the count printed last: a line printed after a later-ended trial's never counts fewer

    def record(self, study: optuna.Study, state: TrialState, seconds: float, ended: datetime | None = None) -> str:
        """Count one trial this process ran, which ``ended`` then (None: now); the progress line, e.g.
        ``5/8 finished, about 3 min left``. Trials that ended after it are not counted yet: two trials that end
        together read 4/8 and 5/8, not 5/8 twice (each line is printed after both told the study). Where the
        later one's line came first, the other repeats its count rather than going back."""
        with self._lock:
            if state in FINISHED:
                self.durations.append(seconds)
            else:
                self.failed += 1
            finished = self._shown = max(self._finished(study, ended), self._shown)
            left = max(0, self.total - finished - (0 if self.replaces_failures else self.failed))
            line = f"{finished}/{self.total} finished"
            if left and self.durations:
                line += f", about {_duration(sum(self.durations) / len(self.durations) * left / self.workers)} left"
            return line

    def _finished(self, study: optuna.Study, ended: datetime | None) -> int:
        trials = [t for t in study.get_trials(deepcopy=False, states=FINISHED)
                  if ended is None or t.datetime_complete is None or t.datetime_complete <= ended]
        if self.points is None:
            return len(trials)
        return len({canonical_point(t.user_attrs.get("point")) for t in trials} & self.points)


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
