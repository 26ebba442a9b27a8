"""A tokenizer trained locally on the task world's own text, saved like any HF checkpoint's.

Byte-level BPE with every digit its own token (digit-level tokens make column arithmetic
learnable for tiny models) and a chat template for the reasoning format:
``<|user|>PROMPT<|assistant|><think>...</think>ANSWER<|endoftext|>``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

SPECIAL_TOKENS = ["<|endoftext|>", "<|pad|>", "<|system|>", "<|user|>", "<|assistant|>", "<think>", "</think>"]
MIN_VOCAB = 256 + len(SPECIAL_TOKENS)
"""Byte-level BPE starts from 256 byte tokens plus the special ones; a smaller vocab learns no merge."""

CHAT_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m['role'] == 'system' %}<|system|>{{ m['content'] }}"
    "{% elif m['role'] == 'user' %}<|user|>{{ m['content'] }}"
    "{% elif m['role'] == 'assistant' %}<|assistant|>{{ m['content'] }}<|endoftext|>"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


TRAIN_CHARS = 16384
"""Characters of each text the tiny tokenizer learns from: BPE training time grows with the square of
a word's length, so one 800 KB row without spaces held a run for minutes before its first step (a row
too long to train on is dropped later anyway)."""


def train_tokenizer(texts: Iterable[str], vocab_size: int = 512) -> PreTrainedTokenizerFast:
    """Train byte-level BPE on ``texts`` (the first :data:`TRAIN_CHARS` of each); digits never merge.

    (tokenizers and transformers are imported here, so config checks can read ``MIN_VOCAB`` cheaply.)
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator((text[:TRAIN_CHARS] for text in texts), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=None, eos_token="<|endoftext|>", pad_token="<|pad|>",
        unk_token=None, additional_special_tokens=SPECIAL_TOKENS[2:],
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.padding_side = "left"
    return fast
