"""The RL part of ``--dry-run``: tokens per rollout batch, updates per step, total updates."""

from __future__ import annotations

from typing import Any


def lr_schedule_text(o: dict[str, Any]) -> str:
    """``warmup 30 -> 0.003 cosine -> 0.0001``, ``warmup 10 -> 1e-06 constant``: ``optim.min_lr`` only for the
    schedule that decays to it (``modules/optim.lr_lambda``). The SFT and RL plans print it (``dry_run.plan_rows``)."""
    floor = f" -> {o['min_lr']:g}" if o["schedule"] == "cosine" else ""
    return f"warmup {o['warmup_steps']} -> {o['lr']:g} {o['schedule']}{floor}"


def schedule_steps(rl: dict[str, Any]) -> int:
    """What the LR schedule counts over the run: its optimizer updates (at most: a filter may keep fewer
    groups) or its rollout steps (``rl.lr_schedule_unit``)."""
    trained = rl["max_kept_prompts"] or rl["prompts_per_step"]
    updates = rl["steps"] * rl["ppo_epochs"] * -(-trained // rl["minibatch_prompts"])
    return updates if rl["lr_schedule_unit"] == "update" else rl["steps"]


def rl_plan_rows(cfg: dict[str, Any], devices: int) -> list[tuple[str, str]]:
    rl = cfg["rl"]
    b, g = rl["prompts_per_step"], rl["group_size"]
    trained = rl["max_kept_prompts"] or b
    updates = rl["ppo_epochs"] * -(-trained // rl["minibatch_prompts"])  # at most: the filter may keep fewer
    engine = "ready"
    try:
        from klear_lab.builders import build
        from klear_lab.registry import ROLLOUT

        obj = build(ROLLOUT, rl["rollout"])
        if hasattr(obj, "check_available"):
            obj.check_available()
    except Exception as exc:  # noqa: BLE001 - reported, not fatal, in a plan
        engine = f"NOT AVAILABLE HERE: {exc}"
    from klear_lab.distributed import multi_device_rl_problem

    n, problem = devices, multi_device_rl_problem(cfg)
    devices_row = (f"NOT SUPPORTED: {problem}" if problem else
                   f"{n} (DDP: each rank generates {b // n} prompts x {g}; gradients all-reduced per update)"
                   if n > 1 else "one")
    return [
        ("training devices", devices_row),
        (f"rollout engine {rl['rollout']['name']!r}", engine),
        ("clip / aggregation / advantage",
         f"{rl['clip']['name']} / {rl['aggregation']['name']} / {rl['advantage']['name']}"),
        ("reward / rollout engine / group filter", f"{rl['reward']['name']} / {rl['rollout']['name']} / "
                                                   f"{rl['group_filter']['name']}"),
        ("prompts x responses per rollout step", f"{b} x {g} = {b * g:,} sequences"),
        ("max response tokens per rollout step", f"{b * g * rl['max_new_tokens']:,}"),
        ("groups trained on per rollout step", f"those kept, at most {trained}" if rl["max_kept_prompts"] else
         "those kept"),
        ("optimizer updates per rollout step", f"up to {updates} (minibatch {rl['minibatch_prompts']} prompts)"),
        ("rollout steps / total updates", f"{rl['steps']:,} / up to {rl['steps'] * updates:,}"),
        ("loss extras",
         f"alpha {rl['alpha']}, entropy {rl['entropy_coef']}, kl {rl['kl_coef']} ({rl['kl_estimator']})"),
        ("lr", f"{lr_schedule_text(cfg['optim'])} (the schedule counts: {rl['lr_schedule_unit']})"),
    ]
