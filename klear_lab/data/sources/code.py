"""Embedded program-synthesis sources: one generator, several named teachers of controlled quality."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import ClassVar

from klear_lab.data.records import Record
from klear_lab.data.sources.base import check_teacher_fields, distinct_prompts
from klear_lab.registry import SOURCE
from klear_lab.world import programs

STYLES = ("full", "terse", "noisy")


@SOURCE.register("code")
@dataclass(frozen=True)
class CodeSource:
    """Write ``f`` from examples, graded by hidden tests (embedded task world, paper Tables 3 and 5).

    ``Record.answer`` is the reference solution's source, ``Record.tests`` the hidden tests. A teacher's
    quality is set by ``teacher_error`` and ``style``, the difficulty mix by ``levels`` and
    ``level_weights`` (see ``world.programs``). Every record carries ``meta["pass_rate"]``: the share of
    16 strong-solver answers that pass its hidden tests (the paper's pass@16 annotation, paper.md §6),
    which the ``band`` filter's ``min_pass_rate`` reads. ``response_correct`` says whether the teacher
    wrote the rule's reference, which fails some flawed tests. Records are deterministic in the world
    seed (``data.world_seed``) plus ``seed_offset``; eval prompts are the held-out partition's.
    """

    task: ClassVar[str] = "code"
    """The task of every record (``Record.task``): read by the up-front ``rl.reward`` check without generating."""
    n_prompts: int = 2000
    """Distinct prompts (tasks) per split: ``n_prompts * responses_per_prompt`` train records, ``n_prompts``
    eval records."""
    responses_per_prompt: int = 1
    """Teacher responses per train prompt, each drawn on its own (error and all); eval prompts get one
    (the paper's final SFT set has up to 16 per prompt, paper.md §4.2)."""
    levels: tuple[int, ...] = (1, 2, 3)
    """Difficulty levels drawn from (``Record.difficulty``): 1 = one-step rules (``a * x + b``, string
    reverse, upper-case), 2 = list reductions and ``x % k``, 3 = compositions and two arguments."""
    level_weights: tuple[float, ...] = (1.0, 1.0, 1.0)
    """Relative weight of each entry of ``levels`` when drawing a task's level (as many as ``levels``,
    each >= 0, positive sum)."""
    teacher_error: float = 0.0
    """Probability (0-1) that a response writes a subtly wrong ``f`` (one of the family's bugs that fails
    some hidden test) instead of the reference; ``response_correct`` False."""
    style: str = "full"
    """How responses reason before the code: ``full`` (the rule, then a check of each shown example),
    ``terse`` (the rule only) or ``noisy`` (``full`` with filler lines)."""
    quality_rank: int = 1
    """Rank for the ``top_k`` data mix, 1 = best (as the paper ranks its sources, paper.md §4.2 Tables 4-5)."""
    seed_offset: int = 0
    """Added to the world seed for this source's draws: copies of one source (same name and levels) with
    different offsets give different tasks and responses."""
    n_tests: int = 12
    """Hidden tests per task, inputs distinct from each other and from the 3 shown examples (fewer where the
    family has too few inputs); the ``code`` reward runs at most its ``max_tests`` of them."""
    flawed_tests: float = 0.0
    """Probability (0-1) that a task's hidden tests were written from a wrong solution, as in scraped code
    data (paper §3.2.1, paper.md §4.3 Fig. 4); its shown examples and teachers still follow the rule."""

    def __post_init__(self) -> None:
        check_teacher_fields(self, STYLES, programs.LEVELS)
        if not 0.0 <= self.flawed_tests <= 1.0:
            raise ValueError(f"flawed_tests must be in [0, 1], got {self.flawed_tests}")
        if self.n_tests < 1:
            raise ValueError(f"n_tests must be >= 1, got {self.n_tests}")

    @property
    def name(self) -> str:
        return type(self).registered_name

    def records(self, seed: int, split: str) -> list[Record]:
        """``n_prompts`` distinct prompts of ``split`` (one response each on eval); deterministic per seed."""
        rng = random.Random(f"{self.name}/{split}/{seed + self.seed_offset}")
        out: list[Record] = []
        for i, level, task, prompt in distinct_prompts(rng, self.n_prompts, split, self._draw):
            uid = f"{self.name}/{split}/{i}"
            # a stream of its own, and teachers answer the sound task: flawed tests change nothing else drawn
            side = random.Random(f"{uid}/{seed + self.seed_offset}/tests")
            graded = programs.with_flawed_tests(task, side) if side.random() < self.flawed_tests else task
            pass_rate = programs.solver_pass_rate(graded, side)
            for j in range(self.responses_per_prompt if split == "train" else 1):
                wrong = rng.random() < self.teacher_error
                response, correct = programs.solve(task, style=self.style, wrong=wrong, rng=rng)
                out.append(Record(
                    uid=f"{uid}/{j}", source=self.name, task=self.task,
                    prompt=prompt, answer=programs.source(task.family, task.family.ref), difficulty=level,
                    response=response, response_correct=correct, tests=graded.tests,
                    meta={"family": task.family.name, "pass_rate": pass_rate},
                ))
        return out

    def _draw(self, rng: random.Random):
        level = rng.choices(self.levels, weights=self.level_weights)[0]
        task = programs.make_task(rng, level, self.n_tests)
        return level, task, programs.prompt_text(task)
