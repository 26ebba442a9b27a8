"""Rollout (generation) engines (registry ``ROLLOUT``), one engine per module; the contract in ``base``.

An engine entry is a frozen dataclass of settings; ``start(model, tokenizer)`` returns a stateful
:class:`~klear_lab.rl.rollout.base.RolloutRuntime` with ``generate``, ``sync_weights`` and ``close``.
``hf`` samples with the live policy through transformers ``generate``; ``vllm`` runs an in-process
vLLM engine whose weights are pushed from the policy after every optimizer update.
"""
