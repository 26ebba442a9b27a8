"""The assistant turn's end: SFT writes the chat template's (Qwen's ``<|im_end|>``), rollouts stop at it, and a
saved model's generation config names it."""

from __future__ import annotations

import pytest
import torch

from klear_lab.data.records import Record
from klear_lab.data.sft import tokenize_records, turn_end
from klear_lab.models.tokenizer import train_tokenizer
from klear_lab.rl.rollout.base import decode_response, eos_token_ids
from klear_lab.stages.common import stop_at_turn_end

QWEN_LIKE = (  # Qwen's turn format: <|im_start|>role\ncontent<|im_end|>\n, with the eos <|endoftext|> unused
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TEXTS = ["what is 12 + 30 ? <think> 12 + 30 = 42 </think> 42"] * 20


@pytest.fixture(scope="module")
def tiny():
    return train_tokenizer(TEXTS, vocab_size=300)


@pytest.fixture(scope="module")
def qwen_like():
    tok = train_tokenizer(TEXTS, vocab_size=300)
    tok.add_tokens(["<|im_start|>", "<|im_end|>"], special_tokens=True)
    tok.chat_template = QWEN_LIKE
    return tok


def _record(response: str) -> Record:
    return Record(uid="u0", source="s", task="math", prompt="what is 12 + 30 ?", answer="42", response=response)


def test_the_tiny_tokenizers_turn_end_is_its_eos(tiny):
    assert turn_end(tiny) == "<|endoftext|>" == tiny.eos_token
    assert eos_token_ids(tiny) == [tiny.eos_token_id]


def test_a_qwen_like_template_ends_the_turn_with_im_end_not_the_eos(qwen_like):
    im_end = qwen_like.convert_tokens_to_ids("<|im_end|>")
    assert turn_end(qwen_like) == "<|im_end|>"
    [example], dropped = tokenize_records(qwen_like, [_record("<think> 12 + 30 = 42 </think> 42")], 512)
    assert dropped == 0 and example.input_ids[-1] == im_end
    assert qwen_like.eos_token_id not in example.input_ids
    assert eos_token_ids(qwen_like) == [qwen_like.eos_token_id, im_end]
    assert decode_response(qwen_like, [*qwen_like(" 42", add_special_tokens=False)["input_ids"], im_end],
                           eos_token_ids(qwen_like)) == " 42"


@pytest.mark.parametrize("template", [
    "{% for m in messages %}{{ m['content'] }}{% endfor %}",  # nothing after the reply
    "{% for m in messages %}{% if m['role'] == 'assistant' %}{{ raise_exception('no') }}{% endif %}{% endfor %}",
])
def test_a_template_without_a_turn_end_falls_back_to_the_eos(tiny, template):
    tok = train_tokenizer(TEXTS, vocab_size=300)
    tok.chat_template = template
    with pytest.warns(UserWarning, match=r"the tokenizer's turn end: its chat template .*; SFT ends each response "
                                         r"with its eos_token '<\|endoftext\|>'"):
        assert turn_end(tok) == tok.eos_token


def test_the_text_before_the_end_token_belongs_to_the_turn_end(tiny):
    tok = train_tokenizer(TEXTS, vocab_size=300)
    tok.chat_template = "{% for m in messages %}{{ m['content'] }} .<|endoftext|>\n{% endfor %}"
    assert turn_end(tok) == " .<|endoftext|>"
    assert eos_token_ids(tok) == [tok.eos_token_id]  # the turn end's last token is the eos: one stop id


def test_rollouts_stop_at_the_special_token_that_ends_a_longer_turn_end(qwen_like):
    """A turn end with text before its special token (``\n<|im_end|>``) stops at that token: a stop list of the
    eos alone would run every rollout to max_new_tokens."""
    import copy

    tok = copy.deepcopy(qwen_like)
    tok.chat_template = QWEN_LIKE.replace("{{ m['content'] }}<|im_end|>", "{{ m['content'] }}\n<|im_end|>")
    assert turn_end(tok) == "\n<|im_end|>"
    assert eos_token_ids(tok) == [tok.eos_token_id, tok.convert_tokens_to_ids("<|im_end|>")]


def test_a_saved_models_generation_config_names_the_turn_end(qwen_like):
    from transformers import GenerationConfig

    model = torch.nn.Linear(1, 1)
    model.generation_config = GenerationConfig(eos_token_id=qwen_like.eos_token_id)
    stop_at_turn_end(model, qwen_like)
    assert model.generation_config.eos_token_id == [qwen_like.eos_token_id,
                                                    qwen_like.convert_tokens_to_ids("<|im_end|>")]


def test_a_generation_config_naming_them_already_is_left_alone(tiny):
    from transformers import GenerationConfig

    model = torch.nn.Linear(1, 1)
    model.generation_config = GenerationConfig(eos_token_id=tiny.eos_token_id)
    stop_at_turn_end(model, tiny)
    assert model.generation_config.eos_token_id == tiny.eos_token_id  # an int still: the saved file is unchanged
