"""Packing: BFD bins, prompt masking, and packed logits equal to unpacked logits."""

from __future__ import annotations

import torch

from klear_lab.data.sft import (
    IGNORE,
    Example,
    collate_rows,
    pack_bfd,
    packed_rows,
    packing_efficiency,
    tokenize_records,
    with_step_tokens,
)
from klear_lab.models.tokenizer import train_tokenizer
from klear_lab.registry import MODEL, SOURCE


def _world(n=40):
    recs = SOURCE.build({"name": "arith_r1", "n_prompts": n}).records(0, "train")
    tok = train_tokenizer([r.prompt + r.response for r in recs], vocab_size=300)
    return recs, tok


def test_bfd_respects_capacity_and_places_everything():
    lengths = [7, 5, 4, 4, 3, 3, 2, 2, 1]
    bins = pack_bfd(lengths, 10)
    assert sorted(i for b in bins for i in b) == list(range(len(lengths)))
    assert all(sum(lengths[i] for i in b) <= 10 for b in bins)
    assert len(bins) == 4  # 31 tokens, optimal is ceil(31/10) = 4


def test_labels_mask_prompt_and_are_shifted():
    ex = Example(input_ids=(10, 11, 12, 13, 14), n_prompt=2)
    batch = collate_rows([[ex, Example((20, 21, 22), 1)]], pad_id=0)
    # position 1 predicts token 12 (first response token); the last token of each example predicts nothing
    assert batch["labels"][0].tolist() == [IGNORE, 12, 13, 14, IGNORE, 21, 22, IGNORE]
    assert batch["position_ids"][0].tolist() == [0, 1, 2, 3, 4, 0, 1, 2]


def test_packed_logits_equal_unpacked():
    recs, tok = _world()
    torch.manual_seed(0)
    model = MODEL.build({"name": "qwen2", "size": "2m"}).build(tok).eval()
    examples, _ = tokenize_records(tok, recs[:8], 512)
    rows = packed_rows(examples, 300, pack=True)
    assert any(len(r) > 1 for r in rows)
    batch = collate_rows(rows, tok.pad_token_id)
    with torch.no_grad():
        packed = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"], use_cache=False).logits
        for b, row in enumerate(rows):
            start = 0
            for ex in row:
                alone = model(input_ids=torch.tensor([ex.input_ids]), use_cache=False).logits[0]
                torch.testing.assert_close(packed[b, start:start + len(ex)], alone, atol=2e-5, rtol=1e-4)
                start += len(ex)


def test_packing_efficiency_on_quickstart_data(repo_root):
    from klear_lab.builders import build_train_records
    from klear_lab.config.compose import compose

    cfg = compose(f"{repo_root}/experiments/quickstart/sft.yaml", ["data.sources.0.n_prompts=3000"])
    records, _ = build_train_records(cfg)
    tok = train_tokenizer([r.prompt + r.response for r in records[:1000]], vocab_size=300)
    cap = cfg["data"]["max_length"]
    examples, _ = tokenize_records(tok, records, cap)
    assert packing_efficiency(packed_rows(examples, cap, pack=True), cap) >= 0.97


def _labelled(n_loss_tokens: int) -> dict[str, torch.Tensor]:
    labels = torch.full((1, 8), IGNORE)
    labels[0, :n_loss_tokens] = 1
    return {"labels": labels}


def test_each_batch_carries_its_accumulation_windows_loss_tokens():
    """Lightning's windows: batches 0-2 and 3-5 step together, the epoch's last one alone; a resumed run
    that starts at batch 4 sees the rest of its window (4-5), then the short last one."""
    counts = [1, 2, 3, 4, 5, 6, 7]
    got = [int(b["step_label_tokens"]) for b in with_step_tokens(iter(map(_labelled, counts)), 3, 0, 7)]
    assert got == [6, 6, 6, 15, 15, 15, 7]
    resumed = with_step_tokens(iter(map(_labelled, counts[4:])), 3, 4, 7)
    assert [int(b["step_label_tokens"]) for b in resumed] == [11, 11, 7]
    assert [int(b["step_label_tokens"]) for b in with_step_tokens(iter(map(_labelled, counts)), 1, 0, 7)] == counts


def test_token_mean_averages_a_short_last_window_over_its_own_micro_batches():
    """Lightning divides every micro-batch by grad_accum, also in an epoch's last window when it holds fewer:
    with grad_accum 2 and 3 micro-batches an epoch, the third step's gradient was half its micro-batch's."""
    from types import SimpleNamespace

    from klear_lab.modules.sft import SFTModule

    batches = list(with_step_tokens(iter(map(_labelled, [1, 2, 3])), 2, 0, 3))
    assert [int(b["step_micro_batches"]) for b in batches] == [2, 2, 1]
    module = SimpleNamespace(trainer=SimpleNamespace(accumulate_grad_batches=2,
                                                     strategy=SimpleNamespace(handles_gradient_accumulation=False)))
    scales = [SFTModule._short_window_scale(module, b) for b in batches]
    assert [s / 2 for s in scales] == [0.5, 0.5, 1.0]  # each step: the mean of its own micro-batches' means
    assert SFTModule._short_window_scale(module, _labelled(3)) == 1.0  # grad_accum 1: no windows read
