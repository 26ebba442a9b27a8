"""Embedded arithmetic sources: one generator, several named teachers of controlled quality."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import ClassVar

from klear_lab.data.records import Record
from klear_lab.data.sources.base import check_teacher_fields, distinct_prompts
from klear_lab.registry import SOURCE
from klear_lab.world import arithmetic

STYLES = ("padded", "full", "steps", "terse", "noisy")


@SOURCE.register("arith")
@dataclass(frozen=True)
class ArithSource:
    """Multi-step arithmetic with chain-of-thought teacher responses (embedded task world).

    A teacher's quality is set by ``teacher_error`` and ``style``, the difficulty mix by ``levels`` and
    ``level_weights`` (see ``world.arithmetic``). Records are deterministic in the world seed
    (``data.world_seed``) plus ``seed_offset``; the eval split holds prompts of the held-out partition
    (``sources.base.is_heldout``), so no eval prompt is ever trained on.
    """

    task: ClassVar[str] = "math"
    """The task of every record (``Record.task``): read by the up-front ``rl.reward`` check without generating."""
    n_prompts: int = 2000
    """Distinct prompts per split: ``n_prompts * responses_per_prompt`` train records, ``n_prompts`` eval
    records."""
    responses_per_prompt: int = 1
    """Teacher responses per train prompt, each drawn on its own (error and all); eval prompts get one
    (the paper's final SFT set has up to 16 per prompt, paper.md §4.2)."""
    levels: tuple[int, ...] = (1, 2, 3)
    """Difficulty levels drawn from (``Record.difficulty``): 1 = two ``+``/``-`` operations, 2 = three,
    3 = three with one ``*`` by a one-digit factor; operands two-digit."""
    level_weights: tuple[float, ...] = (1.0, 1.0, 1.0)
    """Relative weight of each entry of ``levels`` when drawing a prompt's level (as many as ``levels``,
    each >= 0, positive sum)."""
    teacher_error: float = 0.0
    """Probability (0-1) that a response gets one intermediate result wrong (off by ±1, ±2 or ±10), the error
    propagating to its stated answer (``response_correct`` False)."""
    style: str = "full"
    """How responses reason: ``padded`` (fixed-width, zero-padded column traces), ``full`` (column traces
    with carries), ``steps`` (one ``a+b=c`` line per step), ``terse`` (the answer alone) or ``noisy`` (``full``
    with filler lines)."""
    quality_rank: int = 1
    """Rank for the ``top_k`` data mix, 1 = best (as the paper ranks its sources, paper.md §4.2 Tables 4-5)."""
    seed_offset: int = 0
    """Added to the world seed for this source's draws: copies of one source (same name and levels) with
    different offsets give different prompts and responses."""
    shared_prompts: bool = False
    """Draw the prompts from a generator of their own, not the teacher's, so that every teacher with the
    same seed (+ ``seed_offset``), ``n_prompts`` and levels answers the same prompts in the same order
    (paper.md §4.2 Table 3: one prompt set, three teachers); off, each teacher's prompts differ."""

    def __post_init__(self) -> None:
        check_teacher_fields(self, STYLES, arithmetic.LEVELS)

    @property
    def name(self) -> str:
        return type(self).registered_name

    def records(self, seed: int, split: str) -> list[Record]:
        rng = random.Random(f"{self.name}/{split}/{seed + self.seed_offset}")
        prompts_rng = random.Random(f"arith-prompts/{split}/{seed + self.seed_offset}") if self.shared_prompts else rng
        out: list[Record] = []
        for i, level, problem, prompt in distinct_prompts(prompts_rng, self.n_prompts, split, self._draw):
            for j in range(self.responses_per_prompt if split == "train" else 1):
                wrong = rng.random() < self.teacher_error
                err = rng.randrange(len(problem.steps)) if wrong else None
                response, stated = arithmetic.solve(problem, style=self.style, error_step=err, rng=rng)
                out.append(Record(
                    uid=f"{self.name}/{split}/{i}/{j}", source=self.name, task=self.task,
                    prompt=prompt, answer=str(problem.answer), difficulty=level, response=response,
                    response_correct=stated == problem.answer,
                ))
        return out

    def _draw(self, rng: random.Random):
        level = rng.choices(self.levels, weights=self.level_weights)[0]
        problem = arithmetic.make_problem(rng, level)
        return level, problem, arithmetic.prompt_text(problem)
