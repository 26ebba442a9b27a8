"""The config hash: what a run computes, so a resume can tell its own config from another."""

from __future__ import annotations

import copy
from pathlib import Path

from klear_lab.config.compose import compose
from klear_lab.tracking import config_hash

RL = Path(__file__).resolve().parents[3] / "experiments/quickstart/rl.yaml"


def test_a_key_added_later_keeps_older_runs_hashes_until_it_is_set():
    cfg = compose(RL)
    older = copy.deepcopy(cfg)
    del older["rl"]["max_prompt_tokens"]  # a run saved before the key existed
    del older["rl"]["lr_schedule_unit"]
    del older["eval"]["code_reward"]["total_timeout_s"]  # a component's parameter added later
    del older["eval"]["code_reward"]["process_per_test"]
    assert config_hash(older) == config_hash(cfg)
    assert "total_timeout_s" in cfg["eval"]["code_reward"]  # hashing changes nothing of the config
    for changed in ("rl.max_prompt_tokens=4096", "rl.lr_schedule_unit=rollout_step",
                    "eval.code_reward.total_timeout_s=60", "eval.code_reward.process_per_test=true"):
        assert config_hash(compose(RL, [changed])) != config_hash(cfg), changed


def test_a_parameter_added_to_list_items_keeps_older_runs_hashes():
    """A file source's ``label`` came later; runs with file sources saved before it must keep their hash."""
    path = Path(__file__).resolve().parents[3] / "experiments/paper/sft/table4/top1.yaml"
    cfg = compose(path)
    older = copy.deepcopy(cfg)
    for source in older["data"]["sources"]:
        del source["label"]
    assert config_hash(older) == config_hash(cfg)
    labelled = copy.deepcopy(cfg)
    labelled["data"]["sources"][0]["label"] = "openthoughts1"
    assert config_hash(labelled) != config_hash(cfg)

    embedded = compose(path.parents[3] / "quickstart/sft.yaml")  # arith sources' shared_prompts came later
    before = copy.deepcopy(embedded)
    for section in ("sources", "eval_sources"):
        for source in before["data"][section]:
            del source["shared_prompts"]
    assert config_hash(before) == config_hash(embedded)


def test_seed_threads_and_tracking_do_not_change_it_but_what_is_computed_does():
    cfg = compose(RL)
    same = compose(RL, ["run.seed=3", "trainer.num_threads=1", "trainer.checkpoint_every=7", "rl.logp_chunk_tokens=64",
                        "tracking.wandb.mode=disabled"])
    assert config_hash(same) == config_hash(cfg)
    assert config_hash(compose(RL, ["optim.lr=0.001"])) != config_hash(cfg)


def test_a_saved_config_composes_back_to_itself(tmp_path):
    """``safe_dump`` wrote the string "1e-3" bare, and compose read it back as a float: such a run could be
    neither resumed nor run again from its config.yaml."""
    from klear_lab.tracking import write_config

    cfg = compose(RL, ["run.tags=['1e-3', '5e4', 'x']", "run.notes='2.5'"])
    assert cfg["run"]["tags"] == ["1e-3", "5e4", "x"] and cfg["run"]["notes"] == "2.5"
    write_config(tmp_path, cfg)
    assert compose(tmp_path / "config.yaml") == cfg


def test_the_run_directory_and_wandb_id_use_a_safe_form_of_run_name(tmp_path):
    """W&B refuses ids with / : ; , # ? ' (only once the run directory existed), and a / made nested
    directories `klear-lab runs` missed. Older runs' names are not refused: their directories are safe."""
    from klear_lab.tracking import create_run_dir, identity_of

    cfg = compose(RL, [f"run.out_dir={tmp_path}", "run.name='gppo,eps:0.2 a/b'"])
    run_dir = create_run_dir(cfg)
    assert run_dir.parent == tmp_path and run_dir.name.startswith("gppo-eps-0.2-a-b-")
    assert not set(identity_of(cfg, run_dir)["run_id"]) & set("/:;,#?' ")


def test_letters_of_any_script_stay_in_the_run_directory_name(tmp_path):
    """``run.name=ünï`` made ``-n--<time>-...``: a letter outside ASCII was taken for an unsafe character."""
    from klear_lab.tracking import create_run_dir, identity_of

    for name, expected in (("ünï", "ünï-"), ("u\u0308ber", "über-"), ("日本語 α/β", "日本語-α-β-")):
        cfg = compose(RL, [f"run.out_dir={tmp_path}", f"run.name='{name}'"])
        run_dir = create_run_dir(cfg)
        assert run_dir.parent == tmp_path and run_dir.name.startswith(expected), run_dir.name
        run_id = identity_of(cfg, run_dir)["run_id"]
        assert run_id.startswith(expected) and not set(run_id) & set("/:;,#?' ")
