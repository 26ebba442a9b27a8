"""Embedded arithmetic sources: one generator, several named teachers of controlled quality."""

from __future__ import annotations

import random
from dataclasses import dataclass

from klear_lab.data.records import Record
from klear_lab.data.sources.base import check_teacher_fields, distinct_prompts
from klear_lab.registry import SOURCE
from klear_lab.world import arithmetic

STYLES = ("padded", "full", "steps", "terse", "noisy")


@SOURCE.register("arith")
@dataclass(frozen=True)
class ArithSource:
    """Multi-step arithmetic with chain-of-thought teacher responses (embedded task world).

    Quality is controlled by ``teacher_error`` (share of responses with one wrong step, the
    error propagating to the answer) and ``style`` (``full`` column traces, ``steps``, ``terse``,
    ``noisy``). ``levels``/``level_weights`` set the difficulty mix (see ``world.arithmetic``).
    ``shared_prompts``: draw the prompts from a generator of their own, not the teacher's, so that
    every teacher with the same seed, ``n_prompts`` and levels answers the same prompts in the same
    order (paper Table 3: one prompt set, three teachers); off, each teacher's prompts differ.
    """

    n_prompts: int = 2000
    responses_per_prompt: int = 1
    levels: tuple[int, ...] = (1, 2, 3)
    level_weights: tuple[float, ...] = (1.0, 1.0, 1.0)
    teacher_error: float = 0.0
    style: str = "full"
    quality_rank: int = 1
    seed_offset: int = 0
    shared_prompts: bool = False

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
                    uid=f"{self.name}/{split}/{i}/{j}", source=self.name, task="math",
                    prompt=prompt, answer=str(problem.answer), difficulty=level, response=response,
                    response_correct=stated == problem.answer,
                ))
        return out

    def _draw(self, rng: random.Random):
        level = rng.choices(self.levels, weights=self.level_weights)[0]
        problem = arithmetic.make_problem(rng, level)
        return level, problem, arithmetic.prompt_text(problem)
