"""Tiny Qwen2-family causal LMs built from config (no download)."""

from __future__ import annotations

from dataclasses import dataclass

from transformers import Qwen2Config, Qwen2ForCausalLM

from klear_lab.registry import MODEL

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

    Any of ``hidden_size``/``num_layers``/``num_heads``/``intermediate_size`` overrides the
    size preset when > 0.
    """

    size: str = "2m"
    max_position_embeddings: int = 1024
    hidden_size: int = 0
    num_layers: int = 0
    num_heads: int = 0
    num_kv_heads: int = 0
    intermediate_size: int = 0
    rope_theta: float = 10000.0
    tie_word_embeddings: bool = True

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
        hidden, layers, heads, kv, inter = self.dims()
        return Qwen2Config(
            vocab_size=len(tokenizer), hidden_size=hidden, num_hidden_layers=layers,
            num_attention_heads=heads, num_key_value_heads=kv, intermediate_size=inter,
            max_position_embeddings=self.max_position_embeddings, rope_theta=self.rope_theta,
            tie_word_embeddings=self.tie_word_embeddings, bos_token_id=None,
            eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        )

    def build(self, tokenizer) -> Qwen2ForCausalLM:
        return Qwen2ForCausalLM(self.config(tokenizer))
