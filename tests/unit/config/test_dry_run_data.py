"""The dry run's data rows: SFT steps bounded (one example per row at most) and rounded as the stage rounds
them, the held-out problem count the config declares, and a row saying the data rows are not read."""

from __future__ import annotations

import itertools
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from klear_lab.config.compose import compose
from klear_lab.dry_run import plan_rows
from klear_lab.dry_run_data import DATA_NOT_READ, heldout_row, planned_steps

ROOT = Path(__file__).resolve().parents[3]
QUICK = ROOT / "experiments/quickstart"
STEPS = "optimizer steps (est.: data rows not read)"


def sft_rows(*overrides: str, path: Path = QUICK / "sft.yaml") -> dict[str, str]:
    return dict(plan_rows(compose(path, list(overrides)), 1))


@pytest.mark.parametrize(("rows", "rows_per_batch", "accum", "devices", "epochs"), list(itertools.product(
    [1, 7, 12, 15000], [1, 5, 12], [1, 3], [1, 2], [1.0, 2.5, 0.001])))
def test_planned_steps_round_as_the_stage_plans_them(rows, rows_per_batch, accum, devices, epochs):
    """``planned_steps`` is ``stages.sft.sft_plan``'s arithmetic, which the dry run cannot call (it packs
    tokenized examples): the two agree on every row count, batch, window, device count and epoch fraction."""
    from klear_lab.stages.sft import sft_plan

    cfg = compose(QUICK / "sft.yaml", [f"sft.grad_accum={accum}", f"sft.epochs={epochs}",
                                       f"sft.tokens_per_micro_batch={rows_per_batch * 100}"])
    cfg["trainer"]["devices"] = devices  # counted, not started
    dm = SimpleNamespace(rows=[None] * rows, rows_per_batch=rows_per_batch, capacity=100, efficiency=1.0)
    plan = sft_plan(cfg, dm, [], 0, torch.nn.Linear(1, 1))
    assert planned_steps(cfg, rows) == plan["plan/total_steps"] >= 1


def test_quickstart_steps_are_bounded_by_one_example_per_row():
    """15,000 examples in 12-row steps: at most 1,250 steps, what the run plans (its level-1 traces fill
    each row); the old estimate said 625 (mean length max/2)."""
    value = sft_rows()[STEPS]
    assert value.startswith("at most 1,250 (one example per row")
    assert value.endswith("over 50 tokens: half a row); at 2 / 3 per row: 625 / 417")


@pytest.mark.parametrize(("epochs", "most", "fewer"), [
    ("0.001", "at most 2 (", "; 1 at 2 or more per row"),  # 1.25 steps: 2, never 0
    ("0.000001", "at most 1 (", None),  # the old estimate: 0
])
def test_a_fraction_of_an_epoch_rounds_up_as_the_run_does(epochs, most, fewer):
    value = sft_rows(f"sft.epochs={epochs}")[STEPS]
    assert value.startswith(most)
    assert value.endswith(fewer) if fewer else value.endswith("half a row)")


def test_a_warmup_longer_than_every_possible_step_count_is_warned():
    rows = sft_rows("sft.epochs=0.001")  # warmup 30, at most 2 steps
    assert rows["warning"].startswith("optim.warmup_steps=30 is not below the run's at most 2 steps")
    assert "warning" not in sft_rows()  # 1,250 steps at most, 417 at three per row: no certainty either way


def test_without_packing_one_example_per_row_is_the_plan():
    value = sft_rows("data.pack=false")[STEPS]
    assert value == "at most 1,250 (one example per row: data.pack off; fewer if examples are dropped)"


def test_sft_max_steps_is_the_plan():
    rows = sft_rows("sft.max_steps=7")
    assert rows["optimizer steps"] == "7 (sft.max_steps)" and STEPS not in rows


def test_a_file_without_limit_leaves_the_steps_to_the_run(tmp_path):
    sources = f"data.sources=[{{name: file, path: {tmp_path / 'sft.jsonl'}}}]"
    steps = sft_rows(sources)["optimizer steps"]
    assert steps.startswith(f"counted when the run reads the data: data.sources.0 ({tmp_path}/sft.jsonl)")
    limited = sft_rows(sources.replace("}]", ", limit: 24}]"))
    assert limited["examples (declared, before data.filter)"] == "24"
    assert limited[STEPS].startswith("at most 2 (")


def test_arith_facts_declares_its_records():
    rows = sft_rows("data.sources=[{name: arith_r1, n_prompts: 100}, {name: arith_facts, n_records: 20}]")
    assert rows["examples (declared, before data.filter)"] == "120"


def test_a_budget_is_the_examples_whatever_k_is():
    """``top_k`` with ``k: 0`` splits its budget over every source and meets it by repeating records: the bound
    counted the sources' 20 prompts and said at most 10 steps where the run planned 200 (a review)."""
    two = "data.sources=[{name: arith_r1, n_prompts: 10, quality_rank: 1}, {name: arith_r1, n_prompts: 10, " \
          "quality_rank: 2, seed_offset: 1}]"
    for k in ("0", "null", "2"):
        rows = sft_rows(two, f"data.mix={{name: top_k, k: {k}, budget: 400}}")
        assert rows["examples (declared, before data.filter)"] == "400", k


@pytest.mark.parametrize(("sources", "expected"), [
    (None, "200 (arith 200)"),
    ("[{name: arith, n_prompts: 50}, {name: code, n_prompts: 30}]", "80 (arith 50, code 30)"),
    ("[{name: file, path: x.jsonl, limit: 40, label: mine}, {name: arith, n_prompts: 5}]",
     "at most 45 (mine at most 40, arith 5)"),
    ("[{name: file, path: x.jsonl, eval_path: y.jsonl}]",
     "counted when the run reads them: data.eval_sources.0 (y.jsonl) declares no count"),
    ("[]", "none (data.eval_sources is empty)"),
    ("[{name: file, path: a/aime24.jsonl, limit: 30}, {name: file, path: b/math500.jsonl, limit: 500}]",
     "at most 530 (aime24 at most 30, math500 at most 500)"),  # by file: "file at most 30, file at most 500"
])
def test_heldout_problems_are_counted_from_the_config(sources, expected):
    overrides = [f"data.eval_sources={sources}"] if sources is not None else []
    assert heldout_row(compose(QUICK / "sft.yaml", overrides)) == ("held-out problems", expected)


def test_an_eval_plan_counts_its_heldout_problems_and_says_data_is_not_read():
    cfg = compose(QUICK / "sft.yaml")
    cfg["run"]["kind"] = "eval"
    rows = plan_rows(cfg, 1)
    assert dict(rows)["held-out problems"] == "200 (arith 200)"
    assert rows[-1] == DATA_NOT_READ


def test_every_plan_says_its_data_rows_are_not_read(capsys, monkeypatch):
    from klear_lab.cli import main

    monkeypatch.setenv("COLUMNS", "400")  # the row on one line

    assert plan_rows(compose(QUICK / "rl.yaml", ["model.init_from=null"]), 1)[-1] == DATA_NOT_READ
    assert main(["train", str(QUICK / "sft.yaml"), "--dry-run"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "data rows │ not read or checked by a dry run" in out and "--validate-only" in out


@pytest.mark.parametrize(("config", "overrides", "exact"), [
    ("sft.yaml", ["data.sources.0.n_prompts=240"], True),  # level-1 traces of 98-100 tokens: one per row
    ("code_sft.yaml", ["data.sources.0.n_prompts=240", "sft.epochs=0.5"], False),  # many rows hold two
])
def test_the_run_plans_at_most_the_bound_and_at_least_one_step(config, overrides, exact):
    import warnings

    from klear_lab.dry_run_data import estimated_examples
    from klear_lab.stages.sft import prepare_sft

    cfg = compose(QUICK / config, [*overrides, "data.eval_sources.0.n_prompts=5", "tracking.wandb.mode=disabled"])
    most = planned_steps(cfg, estimated_examples(cfg))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # examples longer than data.max_length are dropped
        stage = prepare_sft(cfg)
    stage.close()
    steps = stage.plan["plan/total_steps"]
    assert 1 <= steps <= most
    assert (steps == most) is exact
