"""W&B refuses tags over 64 characters, and only at its first log, after a run's work is done."""

from __future__ import annotations

from lightning.pytorch.loggers import WandbLogger

from klear_lab.config.compose import compose
from klear_lab.loggers import make_loggers, wandb_tags
from klear_lab.tracking import identity_of


def test_wandb_tags_fit_its_limit():
    long = "evaluates:" + "x" * 70
    tags = wandb_tags(["eval", long, long + "y", "eval", ""])
    assert tags[0] == "eval" and len(tags) == 3 and all(1 <= len(t) <= 64 for t in tags)
    assert tags[1] != tags[2] and tags[1].startswith("evaluates:xxx")  # distinct long tags stay distinct


def test_a_real_offline_run_takes_a_long_tag(tmp_path):
    long = "data.sources=" + "a_source_with_a_long_name_" * 4
    cfg = compose(None, ["run.kind=sft", f"run.out_dir={tmp_path}", f"run.tags=[{long}]"])
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    identity = identity_of(cfg, run_dir)
    assert long in identity["tags"]  # run.json keeps the whole tag
    (logger,) = [lg for lg in make_loggers(cfg, run_dir, identity) if isinstance(lg, WandbLogger)]
    logger.log_hyperparams({})  # wandb.init: raised a ValidationError for the long tag before
    run = logger.experiment
    assert all(len(t) <= 64 for t in run.tags) and any(t.startswith("data.sources=a_source") for t in run.tags)
    run.finish()
