"""RL through run_experiment: clip variants change updates only off-policy; plugin clip; bad input."""

from __future__ import annotations

import json
import re
import textwrap
import warnings
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from klear_lab.cli import main
from klear_lab.config.compose import compose
from klear_lab.run import run_experiment
from klear_lab.stages.rl import warn_if_never_updated

ROOT = Path(__file__).resolve().parents[2]

# A reward with variance inside every group, so a random-init policy gets non-zero advantages.
LENGTH_REWARD = textwrap.dedent('''
    from dataclasses import dataclass
    from klear_lab.registry import REWARD
    from klear_lab.rewards.base import RewardOutput

    @REWARD.register("test_digit_count")
    @dataclass(frozen=True)
    class DigitCount:
        """Test reward: number of digits in the response (a signal a random policy can climb)."""
        def __call__(self, completions, records):
            return [RewardOutput(score=float(sum(c.isdigit() for c in t)), acc=False, format_ok=True)
                    for t in completions]
''')


@pytest.fixture(scope="module")
def reward_plugin(tmp_path_factory) -> Path:
    """One file for the whole module: the same name registered from two paths is (rightly) an error."""
    path = tmp_path_factory.mktemp("plugins") / "reward_plugin.py"
    path.write_text(LENGTH_REWARD)
    return path


def tiny_rl(tmp_path: Path, plugin: Path, clip: str, minibatch: int, *extra: str) -> dict:
    return compose(ROOT / "experiments/quickstart/rl.yaml", tiny_rl_args(tmp_path, plugin, clip, minibatch, *extra))


def tiny_rl_args(tmp_path: Path, plugin: Path, clip: str, minibatch: int, *extra: str) -> list[str]:
    """Overrides of the quickstart RL that make a run of a few seconds from a random-init tiny model."""
    return [
        f"run.out_dir={tmp_path / 'runs'}", "model.init_from=null", "model.tiny.size=2m",
        f"plugins=[{plugin}]", "rl.reward=test_digit_count", "rl.group_filter=none",
        f"rl.clip={clip}", "rl.steps=1", "rl.prompts_per_step=4", "rl.group_size=4",
        f"rl.minibatch_prompts={minibatch}", "rl.max_new_tokens=16", "rl.eval_every=0", "optim.lr=0.05",
        "optim.warmup_steps=0", "rl.alpha=0.0", "data.sources.0.n_prompts=20", "data.eval_sources.0.n_prompts=4",
        "eval.max_new_tokens=8", "trainer.checkpoint=false", "tracking.wandb.enabled=false", *extra,
    ]


def final_weights(cfg: dict) -> dict[str, torch.Tensor]:
    result = run_experiment(cfg)
    return load_file(result.run_dir / "model" / "model.safetensors")


def max_diff(a: dict, b: dict) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def test_clip_variant_matters_only_off_policy(tmp_path, reward_plugin):
    # one minibatch: the only update is on-policy (ratio = 1), so PPO and GPPO give the same step
    on_ppo = final_weights(tiny_rl(tmp_path, reward_plugin, "ppo", minibatch=4))
    on_gppo = final_weights(tiny_rl(tmp_path, reward_plugin, "gppo", minibatch=4))
    assert max_diff(on_ppo, on_gppo) < 1e-6
    # two minibatches: the second update is off-policy and the variants diverge
    off_ppo = final_weights(tiny_rl(tmp_path, reward_plugin, "ppo", minibatch=2))
    off_gppo = final_weights(tiny_rl(tmp_path, reward_plugin, "gppo", minibatch=2))
    assert max_diff(off_ppo, off_gppo) > 1e-4


def test_chunked_log_probs_train_the_same_policy(tmp_path, reward_plugin):
    """rl.logp_chunk_tokens changes the memory of the update, not what it computes (two updates, the second
    off-policy, entropy in the loss, so every term's gradient goes through the chunks)."""
    runs = [run_experiment(tiny_rl(tmp_path, reward_plugin, "gppo", 2, "rl.entropy_coef=0.01", *extra)).metrics
            for extra in ([], ["rl.logp_chunk_tokens=5"])]
    for key in ("train/loss", "train/pg_loss", "rl/entropy", "rl/grad_norm", "rl/ratio_max", "rl/ratio_min"):
        assert runs[1][key] == pytest.approx(runs[0][key], rel=1e-3), key  # Adam amplifies float rounding
    assert runs[0]["rl/ratio_max"] > 1.5  # the second update is off-policy: the ratios went through chunks too


def test_old_log_probs_take_a_minibatch_at_a_time(tmp_path, reward_plugin, monkeypatch):
    """With rl.micro_batch_seqs=0 the update forwards a minibatch at a time; the old log-probs were
    computed for every kept row in one forward ([rows, T, V] float32), the step's largest."""
    import klear_lab.modules.rl as rl_module

    real, rows = rl_module.response_logp, []

    def spy(model, prompts, *args, **kwargs):
        rows.append(len(prompts))
        return real(model, prompts, *args, **kwargs)

    monkeypatch.setattr(rl_module, "response_logp", spy)
    run_experiment(tiny_rl(tmp_path, reward_plugin, "gppo", 2))  # 4 prompts x 4: two minibatches of 8 rows
    assert rows and max(rows) == 8, rows


def test_old_log_probs_are_batched_as_the_update_forwards(tmp_path, reward_plugin, monkeypatch):
    """Log-probs depend on which rows share a forward (padding width, kernel shapes; up to 4e-3 a token in
    bf16): the old ones were cut from all kept rows in chunks of rl.micro_batch_seqs (3, 3, 3, 3, 3, 1) while
    the update forwards each minibatch's (3, 3, 2, 3, 3, 2), so the on-policy ratio was not exactly 1."""
    import torch

    import klear_lab.modules.rl as rl_module

    real, calls = rl_module.response_logp, []

    def spy(model, prompts, response_ids, *args, **kwargs):  # which rows each forward holds, in order
        rows = tuple((tuple(map(int, p)), tuple(r.tolist())) for p, r in zip(prompts, response_ids))
        calls.append((torch.is_grad_enabled(), rows))
        return real(model, prompts, response_ids, *args, **kwargs)

    monkeypatch.setattr(rl_module, "response_logp", spy)
    run_experiment(tiny_rl(tmp_path, reward_plugin, "gppo", 2, "rl.micro_batch_seqs=3"))  # 2 minibatches of 8 rows
    old, update = ([rows for grad, rows in calls if grad == g] for g in (False, True))
    assert [len(rows) for rows in old] == [3, 3, 2, 3, 3, 2], calls
    assert old == update  # the same rows in the same forwards and order, not only the same sizes


PLUGIN_CLIP = textwrap.dedent('''
    from dataclasses import dataclass
    import torch
    from klear_lab.registry import CLIP
    from klear_lab.rl.clip.base import ClipOutput

    @CLIP.register("outside_sign_clip")
    @dataclass(frozen=True)
    class SignClip:
        """Test plugin: -sign(A) * ratio, clipped to [0.5, 2]."""
        low: float = 0.5
        high: float = 2.0
        def __call__(self, logp, old_logp, adv, mask):
            ratio = torch.exp(logp - old_logp).clamp(self.low, self.high)
            adv = adv.unsqueeze(-1) if adv.dim() == 1 else adv
            zero = torch.zeros((), device=logp.device)
            metrics = {k: zero for k in ("clipfrac_low", "clipfrac_high", "clipfrac", "ratio_mean",
                                         "ratio_min", "ratio_max", "approx_kl")}
            return ClipOutput(loss=-torch.sign(adv) * ratio * mask, metrics=metrics)
''')


def test_plugin_clip_from_outside_file_runs(tmp_path, reward_plugin):
    outside = tmp_path / "elsewhere" / "my_clip.py"
    outside.parent.mkdir()
    outside.write_text(PLUGIN_CLIP)
    cfg = compose(ROOT / "experiments/quickstart/rl.yaml", [
        f"run.out_dir={tmp_path / 'runs'}", "model.init_from=null", f"plugins=[{reward_plugin},{outside}]",
        "rl.reward=test_digit_count", "rl.group_filter=none", "rl.clip=outside_sign_clip", "rl.steps=1",
        "rl.prompts_per_step=2", "rl.group_size=2", "rl.minibatch_prompts=1", "rl.max_new_tokens=8",
        "rl.eval_every=0", "rl.alpha=0.0", "data.sources.0.n_prompts=10", "data.eval_sources.0.n_prompts=2",
        "eval.max_new_tokens=4", "trainer.checkpoint=false", "tracking.wandb.enabled=false"])
    result = run_experiment(cfg)
    assert cfg["rl"]["clip"] == {"name": "outside_sign_clip", "low": 0.5, "high": 2.0}
    assert result.metrics["rl/updates_per_step"] == 2.0


@pytest.mark.parametrize(("override", "needle"), [
    ("rl.clip=gpo", "unknown clip"),
    ("rl.clip.eps_low=1.5", "eps_low"),
    ("rl.group_size=1", "rl.group_size"),
    ("rl.minibatch_prompts=5", "must divide"),
])
def test_bad_rl_input_fails_before_model_load(tmp_path, capsys, override, needle):
    code = main(["train", str(ROOT / "experiments/quickstart/rl.yaml"), f"run.out_dir={tmp_path}/runs", override])
    assert code == 2
    assert needle in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_policy_from_a_checkpoint_trains_in_train_mode_with_dropout_off(tmp_path, reward_plugin):
    """from_pretrained returns eval mode (no gradient checkpointing); RL needs train mode, no dropout."""
    from klear_lab.build_model import build_tokenizer_and_model
    from klear_lab.stages.common import save_model

    cfg = tiny_rl(tmp_path, reward_plugin, "ppo", minibatch=4)  # one update: on-policy, ratio exactly 1
    tokenizer, model = build_tokenizer_and_model(cfg, ["1+2=3", "4+5=9", "answer \\boxed{7}"] * 50)
    model.config.attention_dropout = 0.5  # a checkpoint whose config asks for dropout
    save_model(model, tokenizer, tmp_path / "ckpt")
    cfg["model"].update(name_or_path=str(tmp_path / "ckpt"), gradient_checkpointing=True)
    cfg["rl"]["kl_coef"] = 0.01  # a frozen reference model (eval mode on purpose) as well

    loaded = build_tokenizer_and_model(cfg, [])[1]
    checkpointing = getattr(loaded, "is_activation_checkpointing", None)
    assert loaded.training and (loaded.is_gradient_checkpointing if checkpointing is None else checkpointing)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        metrics = run_experiment(cfg).metrics
    assert not [w for w in caught if "in eval mode" in str(w.message)]
    assert metrics["rl/ratio_min"] == pytest.approx(1.0, abs=1e-6)  # dropout noise would move it
    assert metrics["rl/ratio_max"] == pytest.approx(1.0, abs=1e-6)


def test_code_rl_filters_flawed_tests_and_logs_the_prompt_pool(tmp_path):
    """Code RL with the band filter: exactly the sound tasks are kept, and the pool size is logged."""
    import csv

    from klear_lab.data.sources.code import CodeSource

    cfg = compose(ROOT / "experiments/quickstart/code_rl.yaml", [
        f"run.out_dir={tmp_path / 'runs'}", "model.init_from=null",
        "data.sources=[{name: code, n_prompts: 60, flawed_tests: 0.5}]",
        "data.filter={name: band, min_pass_rate: 0.5}", "rl.steps=1", "rl.prompts_per_step=2",
        "rl.group_size=2", "rl.minibatch_prompts=2", "rl.max_new_tokens=8", "rl.eval_every=0",
        "data.eval_sources.0.n_prompts=2", "eval.max_new_tokens=4", "trainer.checkpoint=false",
        "tracking.wandb.enabled=false"])
    result = run_experiment(cfg)
    sound = sum(r.meta["pass_rate"] >= 0.5 for r in CodeSource(n_prompts=60, flawed_tests=0.5).records(0, "train"))
    assert 10 < sound < 50
    assert result.metrics["data/records"] == sound and result.metrics["data/kept_frac/code"] == sound / 60
    with open(result.run_dir / "csv" / "metrics.csv") as fh:
        logged = [row for row in csv.DictReader(fh) if row.get("data/records")]
    assert float(logged[0]["data/records"]) == result.metrics["data/records"]


def test_rl_gain_from_avg_at_k_evaluations(tmp_path, reward_plugin):
    cfg = compose(ROOT / "experiments/quickstart/rl.yaml", [
        f"run.out_dir={tmp_path / 'runs'}", "model.init_from=null",
        "model.tiny.size=2m", f"plugins=[{reward_plugin}]", "rl.reward=test_digit_count", "rl.group_filter=none",
        "rl.steps=1", "rl.prompts_per_step=2", "rl.group_size=2", "rl.minibatch_prompts=2", "rl.max_new_tokens=8",
        "rl.eval_every=0", "data.sources.0.n_prompts=10", "data.eval_sources.0.n_prompts=3", "eval.max_new_tokens=8",
        "eval.samples=3", "eval.temperature=0.6", "eval.top_p=0.95", "trainer.checkpoint=false",
        "tracking.wandb.enabled=false"])
    m = run_experiment(cfg).metrics
    assert m["val/samples"] == 3 and m["val/n"] == 3 and m["val/acc"] <= m["val/pass_at_k"]
    assert m["val/gain"] == pytest.approx(m["val/acc_final"] - m["val/acc_start"])


def test_rl_max_prompt_tokens_drops_long_prompts_before_the_run(tmp_path, reward_plugin):
    from klear_lab.builders import build_train_records
    from klear_lab.data.sft import prompt_ids
    from klear_lab.errors import DataError
    from klear_lab.stages.rl import prepare_rl

    mixed = ["data.sources.0.levels=[1,2,3]", "data.sources.0.level_weights=[1,1,1]"]  # prompts of 3 lengths
    cfg = tiny_rl(tmp_path, reward_plugin, "gppo", 2, *mixed)
    whole = prepare_rl(cfg)
    tokenizer = whole.module.tokenizer
    lengths = [len(prompt_ids(tokenizer, r.prompt)) for r in build_train_records(cfg)[0]]
    cap = max(lengths) - 1
    assert min(lengths) <= cap  # the embedded prompts differ in length: the longest go, the rest stay
    capped = prepare_rl(tiny_rl(tmp_path, reward_plugin, "gppo", 2, *mixed, f"rl.max_prompt_tokens={cap}"))
    assert capped.data_stats["data/dropped_long_prompts"] == sum(n > cap for n in lengths) >= 1
    assert capped.data_stats["data/records"] == len(lengths) - capped.data_stats["data/dropped_long_prompts"]
    assert all(len(prompt_ids(tokenizer, r.prompt)) <= cap for batch in capped.batches for r in batch)
    with pytest.raises(DataError, match=r"rl.max_prompt_tokens=1: all 20 training prompts are longer"):
        prepare_rl(tiny_rl(tmp_path, reward_plugin, "gppo", 2, *mixed, "rl.max_prompt_tokens=1"))


def test_without_evaluations_during_training_the_run_evaluates_twice(tmp_path, reward_plugin):
    """With rl.eval_every=0 Lightning also validated at the epoch's end, so the final evaluation ran twice
    (at paper scale: a second avg@32 of 32K-token answers)."""
    from klear_lab.tracking import csv_rows

    result = run_experiment(tiny_rl(tmp_path, reward_plugin, "ppo", 4, "rl.steps=2"))
    rows = csv_rows(result.run_dir / "csv" / "metrics.csv")
    evaluated = [int(r["step"]) for r in rows if r.get("val/acc")]
    assert evaluated == [0, 2]  # the starting point and the end
    # each rollout step's reward and loss, under the default trainer.log_every_n_steps (5: one in five before)
    assert len([r for r in rows if r.get("reward/mean")]) == 2 and len([r for r in rows if r.get("train/loss")]) == 2


def test_evaluations_are_logged_at_the_rollout_steps_done(tmp_path, reward_plugin):
    """With rl.eval_every=1 the starting evaluation and the one after step 1 were both logged at step 0 (a
    curve kept only the second), and every later one a step early; the final one, after fit, was not."""
    from klear_lab.tracking import csv_rows

    cfg = tiny_rl(tmp_path, reward_plugin, "ppo", 4, "rl.steps=3", "rl.eval_every=1", "trainer.log_every_n_steps=1")
    rows = csv_rows(run_experiment(cfg).run_dir / "csv" / "metrics.csv")
    assert [int(r["step"]) for r in rows if r.get("val/acc")] == [0, 1, 2, 3]  # the start, then after each step
    assert [int(r["step"]) for r in rows if r.get("reward/mean")] == [0, 1, 2]  # Lightning's 0-based index


@pytest.mark.parametrize(("unit", "expected"), [("update", [0.25, 0.75, 1.0]), ("rollout_step", [0.25, 0.5, 0.75])])
def test_the_lr_schedule_counts_updates_or_rollout_steps(tmp_path, reward_plugin, unit, expected):
    """verl steps the LR schedule once per rollout step: the paper's 10 warmup steps are 10 rollout steps, not
    10 of its 8 updates a step. Here 2 updates a step and 4 warmup steps: the LR at each step's start."""
    from klear_lab.tracking import csv_rows

    cfg = tiny_rl(tmp_path, reward_plugin, "ppo", 2, "rl.steps=3", "optim.warmup_steps=4", "optim.schedule=constant",
                  f"rl.lr_schedule_unit={unit}", "trainer.log_every_n_steps=1")
    result = run_experiment(cfg)
    rows = csv_rows(result.run_dir / "csv" / "metrics.csv")
    assert [float(r["lr-AdamW/pg1"]) / 0.05 for r in rows if r.get("lr-AdamW/pg1")] == pytest.approx(expected)


def test_max_kept_prompts_trains_on_the_first_survivors(tmp_path, reward_plugin):
    cfg = tiny_rl(tmp_path, reward_plugin, "ppo", 2, "rl.max_kept_prompts=2")  # 4 prompts, no filter
    metrics = run_experiment(cfg).metrics
    assert metrics["rl/trained_groups"] == 2 and metrics["rl/updates_per_step"] == 1


def test_a_diverged_rl_update_stops_the_run(tmp_path, reward_plugin):
    """A NaN gradient norm stops the run before the update would make the weights NaN."""
    from klear_lab.errors import DivergedError

    cfg = tiny_rl(tmp_path, reward_plugin, "gppo", 2, "optim.lr=1e30", "optim.min_lr=0", "optim.grad_clip=0")
    with pytest.raises(DivergedError, match=r"train/grad_norm is (nan|inf) at step"):
        run_experiment(cfg)


BROKEN_REWARD = textwrap.dedent('''
    from dataclasses import dataclass
    from klear_lab.registry import REWARD
    from klear_lab.rewards.base import RewardOutput

    @REWARD.register("{name}")
    @dataclass(frozen=True)
    class Broken:
        """Test reward with a mistake that shows only once it is called."""
        def __call__(self, completions, records):
            {body}
''')


def test_a_reward_breaking_its_contract_mid_run_is_one_error_line_and_a_bug_keeps_its_traceback(tmp_path, capsys):
    """A plugin reward returning one output too few failed the run with Lightning's whole traceback above the
    message (a TypeError); now one line names the plugin's file and line, the exit code is 2 like a config
    error's, and run.json records the failure. An exception of the plugin's own still shows its traceback."""
    short, raising = tmp_path / "short_reward.py", tmp_path / "raising_reward.py"
    short.write_text(BROKEN_REWARD.format(name="short_reward", body="return [RewardOutput(1.0, False, True)]"))
    raising.write_text(BROKEN_REWARD.format(name="raising_reward", body="raise RuntimeError('a bug in it')"))
    train = ["train", str(ROOT / "experiments/quickstart/rl.yaml")]
    assert main([*train, *tiny_rl_args(tmp_path, short, "ppo", 4, "rl.reward=short_reward")]) == 2
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert re.fullmatch(rf"klear-lab: error: reward 'short_reward' \({re.escape(str(short))}:\d+\) returned a list "
                        r"of 1 for 16 completions; a reward returns one RewardOutput per completion.*",
                        err.strip().splitlines()[-1])
    (record,) = (tmp_path / "runs").glob("*/run.json")
    assert json.loads(record.read_text())["status"] == "failed"
    assert "reward 'short_reward'" in json.loads(record.read_text())["error"]
    with pytest.raises(RuntimeError, match="a bug in it"):  # not caught: Python prints its traceback
        main([*train, *tiny_rl_args(tmp_path, raising, "ppo", 4, "rl.reward=raising_reward")])


def test_a_run_whose_every_group_was_filtered_says_the_policy_never_moved(tmp_path, reward_plugin):
    """A random-init policy answers no problem: every group scores 0 alike and the zero-variance filter drops
    it. The run completed with ``val/gain`` 0 and no sign that it never trained."""
    cfg = tiny_rl(tmp_path, reward_plugin, "ppo", 4, "rl.reward=math_verify",
                  "rl.group_filter={name: zero_variance, metric: acc}", "rl.steps=2")
    with pytest.warns(UserWarning, match=r"the policy was never updated: none of the 2 rollout steps had a group "
                                         r"to train on \(rl/trained_groups 0: rl.group_filter=zero_variance kept "
                                         r"none \(it drops groups whose responses are all fully correct or all "
                                         r"not, rl.group_filter.metric=acc: no group had both\)"):
        result = run_experiment(cfg)
    assert result.metrics["train/steps"] == 0
    with pytest.warns(UserWarning, match=r"kept none \(it drops groups whose responses all scored alike: rl.reward "
                                         r"scored every group so\)"):  # the soft scores may differ under acc
        warn_if_never_updated(0, 2, {"group_filter": {"name": "zero_variance", "metric": "score"}})
