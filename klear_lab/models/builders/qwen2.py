"""Tiny Qwen2-family causal LMs built from config (no download)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from klear_lab.registry import MODEL

if TYPE_CHECKING:  # imported where a model is built: composing a config (each CLI command, sweep) reads the
    from transformers import Qwen2Config, Qwen2ForCausalLM  # registry, and transformers' Qwen2 costs seconds

# name -> (hidden, layers, heads, kv_heads, intermediate); parameter counts at vocab 512
SIZES = {
    "2m": (192, 4, 4, 2, 576),      # ~1.9M
    "10m": (288, 10, 4, 2, 864),    # ~9.5M
    "30m": (448, 12, 8, 4, 1344),   # ~29M
}


@MODEL.register("qwen2")
@dataclass(frozen=True)
class TinyQwen2:
    """A Qwen2 architecture (RMSNorm, RoPE, GQA, SwiGLU) at a named tiny size: 2m, 10m, 30m.

    Each shape field (``hidden_size``, ``num_layers``, ``num_heads``, ``num_kv_heads``,
    ``intermediate_size``) overrides the ``size`` preset when > 0; the vocabulary is the run's tokenizer's
    (``model.tokenizer_vocab``).
    """

    size: str = "2m"
    """Preset shape (hidden, layers, heads/kv heads, MLP width; parameters at vocab 512): ``2m`` (192, 4,
    4/2, 576; ~1.9M), ``10m`` (288, 10, 4/2, 864; ~9.5M) or ``30m`` (448, 12, 8/4, 1344; ~29M)."""
    max_position_embeddings: int = 1024
    """Positions (tokens) the model is built for; nothing truncates there, but a run whose longest sequence
    (``data.max_length``, ``rl.max_prompt_tokens + rl.max_new_tokens``, ``eval.max_new_tokens``) exceeds it warns."""
    hidden_size: int = 0
    """Model width; must split into ``num_heads`` heads of an even size (RoPE). 0 = the preset's."""
    num_layers: int = 0
    """Decoder layers. 0 = the preset's."""
    num_heads: int = 0
    """Attention (query) heads, a multiple of ``num_kv_heads``. 0 = the preset's."""
    num_kv_heads: int = 0
    """Key/value heads of grouped-query attention, dividing ``num_heads``. 0 = the preset's."""
    intermediate_size: int = 0
    """Inner width of the SwiGLU MLP. 0 = the preset's."""
    rope_theta: float = 10000.0
    """Base of the rotary position encoding's frequencies (RoPE ``theta``, > 0)."""
    tie_word_embeddings: bool = True
    """Share the input embedding matrix with the output (LM head) projection."""

    def __post_init__(self) -> None:
        """Shapes HF would refuse with a traceback, or accept and train on NaNs (``rope_theta <= 0``)."""
        if self.size not in SIZES:
            raise ValueError(f"size must be one of {sorted(SIZES)}, got {self.size!r}")
        for field in ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "intermediate_size"):
            if getattr(self, field) < 0:
                raise ValueError(f"{field} must be >= 0 (0 = the {self.size} preset's), got {getattr(self, field)}")
        if self.max_position_embeddings < 1 or not self.rope_theta > 0:
            raise ValueError("max_position_embeddings must be >= 1 and rope_theta > 0, got "
                             f"{self.max_position_embeddings} and {self.rope_theta}")
        hidden, _, heads, kv, _ = self.dims()
        if hidden % heads or (hidden // heads) % 2:
            raise ValueError(f"hidden_size {hidden} must split into num_heads {heads} heads of an even size (RoPE)")
        if heads % kv:
            raise ValueError(f"num_heads {heads} must be a multiple of num_kv_heads {kv} (grouped-query attention)")

    def dims(self) -> tuple[int, int, int, int, int]:
        """(hidden, layers, heads, kv_heads, intermediate): the preset's, each overridden when > 0."""
        given = (self.hidden_size, self.num_layers, self.num_heads, self.num_kv_heads, self.intermediate_size)
        return tuple(g or p for g, p in zip(given, SIZES[self.size], strict=True))  # type: ignore[return-value]

    def config(self, tokenizer) -> Qwen2Config:
        from transformers import Qwen2Config

        hidden, layers, heads, kv, inter = self.dims()
        return Qwen2Config(
            vocab_size=len(tokenizer), hidden_size=hidden, num_hidden_layers=layers,
            num_attention_heads=heads, num_key_value_heads=kv, intermediate_size=inter,
            max_position_embeddings=self.max_position_embeddings, rope_theta=self.rope_theta,
            tie_word_embeddings=self.tie_word_embeddings, bos_token_id=None,
            eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        )

    def build(self, tokenizer) -> Qwen2ForCausalLM:
        from transformers import Qwen2ForCausalLM

        return Qwen2ForCausalLM(self.config(tokenizer))
