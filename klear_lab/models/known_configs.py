"""Architectures of paper-scale checkpoints, so ``--dry-run`` works offline without their files.

Values from the public ``config.json`` of each model (Qwen3 technical report family).
"""

from __future__ import annotations

QWEN3_8B = {
    "model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "hidden_size": 4096,
    "intermediate_size": 12288, "num_hidden_layers": 36, "num_attention_heads": 32,
    "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936, "max_position_embeddings": 40960,
    "rope_theta": 1000000.0, "tie_word_embeddings": False, "rms_norm_eps": 1e-6,
}

KNOWN = {
    "Qwen/Qwen3-8B-Base": QWEN3_8B,
    "Qwen/Qwen3-8B": QWEN3_8B,
    "Kwai-Klear/Klear-Reasoner-8B-SFT": QWEN3_8B,
    "Kwai-Klear/Klear-Reasoner-8B": QWEN3_8B,
}
