"""Which engine decodes the held-out completions: ``eval.engine``.

``generate`` (the default) runs transformers ``generate`` on the live model, ``eval.batch_size``
sequences per call. ``rollout`` decodes with the run's rollout engine (``rl.rollout``, e.g. vLLM):

* in RL it is the very engine that samples the rollouts. It already holds the policy's latest
  weights (they are pushed after every update), and no second copy of the model claims GPU memory;
* in SFT and eval runs an engine of that kind is started before training when SFT evaluates during
  training (so an engine that cannot decode this model fails before any step), else at the final
  evaluation; before each later evaluation it gets the model's current weights.

An ``hf`` rollout engine is what ``generate`` runs anyway, so ``rollout`` with it changes nothing
(``builders.eval_engine``). At paper scale (avg@32 of up to 32K-token responses every 10 RL steps) HF
``generate`` takes hours where vLLM takes minutes. Either way each problem's samples come from a
seed of its own (``klear_lab.eval.heldout``), so they do not depend on which problems share a batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # config checks import ENGINES: keep torch out of config composition
    from klear_lab.rl.rollout.base import RolloutRuntime

ENGINES = ("generate", "rollout")
# the config key an owned engine's errors name: the engine is ``rl.rollout``'s, started for ``eval.engine: rollout``
OWNED_KEY = "rl.rollout (eval.engine: rollout)"


class EvalEngine:
    """A rollout runtime for evaluation: shared (RL's own engine) or owned (started on first use).

    Args:
        config: A rollout component (``VLLMRollout``...) to start an engine of its own from.
        shared: A running engine to decode with as it is; this object never closes it.
    """

    def __init__(self, config=None, shared: RolloutRuntime | None = None) -> None:
        if (config is None) == (shared is None):
            raise ValueError("EvalEngine needs exactly one of config (an engine to start) or shared (a running one)")
        self.config, self.shared = config, shared
        self._owned: RolloutRuntime | None = None

    def runtime(self, model, tokenizer) -> RolloutRuntime:
        """The engine, holding ``model``'s current weights."""
        if self.shared is not None:
            return self.shared
        if self._owned is None:
            from klear_lab.rl.rollout.checks import check_rollout_runtime

            started = self.config.start(model, tokenizer)
            check_rollout_runtime(started, self.config, OWNED_KEY)  # closes it when it refuses it
            self._owned = started
        else:
            self._owned.sync_weights(model)
        return self._owned

    def close(self) -> None:
        """Shut down an engine this object started (idempotent); a shared one is left running."""
        owned, self._owned = self._owned, None
        if owned is not None:
            owned.close()
