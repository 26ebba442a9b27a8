"""An ``sft.max_steps`` far past one epoch of the training rows is warned of, by the run and by its dry run."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from klear_lab.config.compose import compose
from klear_lab.dry_run import plan_rows
from klear_lab.stages.sft_steps import many_epochs_problem

QUICKSTART = Path(__file__).resolve().parents[2] / "experiments/quickstart/sft.yaml"


def test_the_problem_names_the_key_the_epochs_and_the_rows():
    text = many_epochs_problem(400, 33.3333, "120 packed training rows (120 examples)")
    assert text.startswith("sft.max_steps=400 passes 33.3 times over 120 packed training rows (120 examples): "
                           "more than 10 epochs")
    assert many_epochs_problem(400, 10, "rows") is None  # the threshold itself is quiet
    assert many_epochs_problem(121, 121 / 12, "rows").startswith("sft.max_steps=121 passes 10.1 times")
    assert many_epochs_problem(0, 34, "rows") is None  # an sft.epochs run asked for its epochs


def test_the_run_warns_when_max_steps_repeats_its_rows_many_times(tiny_sft_overrides):
    from klear_lab.stages.sft import prepare_sft

    # 120 one-row examples, 10 rows per micro-batch: 12 steps an epoch, so 200 steps are 16.7 epochs
    cfg = compose(QUICKSTART, [*tiny_sft_overrides, "sft.max_steps=200", "trainer.accelerator=cpu"])
    with pytest.warns(UserWarning, match=r"sft.max_steps=200 passes 16.7 times over 120 packed training rows "
                                         r"\(120 examples\): more than 10 epochs"):
        stage = prepare_sft(cfg)
    stage.close()


def test_the_run_is_quiet_at_a_few_epochs(tiny_sft_overrides):
    from klear_lab.stages.sft import prepare_sft

    cfg = compose(QUICKSTART, [*tiny_sft_overrides, "sft.max_steps=100", "trainer.accelerator=cpu"])  # 9 epochs
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prepare_sft(cfg).close()
    assert not [w for w in caught if "sft.max_steps" in str(w.message)]


@pytest.mark.parametrize(("max_steps", "warned"), [(50_000, True), (5_000, False), (0, False)])
def test_the_dry_run_warns_from_the_declared_examples(max_steps, warned):
    """15,000 declared examples, 12 per micro-batch: at most 1,250 steps an epoch, so 50,000 steps are at
    least 40 epochs."""
    rows = plan_rows(compose(QUICKSTART, [f"sft.max_steps={max_steps}"]), 2_000_000)
    found = [v for k, v in rows if k == "warning" and "sft.max_steps" in v]
    assert bool(found) == warned
    if warned:
        assert found[0].startswith("sft.max_steps=50000 passes at least 40 times over the 15,000 declared "
                                   "training examples")
