"""One run, several processes: what rank > 0 of a Lightning DDP run must and must not do.

Lightning's DDP launcher (``trainer.strategy=ddp``, one node) starts local ranks 1..N-1 by running
this process's command line again, with ``LOCAL_RANK`` set, at the first ``trainer.fit`` or
``validate``. Such a process goes through ``run_experiment`` from the start; it must join the run of
rank 0 rather than make a second run directory, W&B run and summary. Rank 0 therefore exports its
run directory in ``KLEAR_RUN_DIR`` before training; a process that finds it together with a
``LOCAL_RANK`` above 0 is a joined rank: it builds the same data and model (same seed), trains its
shard, and writes nothing of its own. Only rank 0 saves the model and finishes loggers.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

RUN_DIR_ENV = "KLEAR_RUN_DIR"


def local_rank() -> int:
    """This process's local rank as Lightning's launcher set it (0 when not launched by it)."""
    value = os.environ.get("LOCAL_RANK", "0")
    return int(value) if value.isdigit() else 0


def joined_run_dir() -> Path | None:
    """The run directory of rank 0 when this process is a rank > 0 Lightning relaunched, else None."""
    run_dir = os.environ.get(RUN_DIR_ENV)
    return Path(run_dir) if run_dir and local_rank() > 0 else None


def is_rank_zero() -> bool:
    """True in the process that owns the run's files (Lightning's own view of the global rank)."""
    from lightning.pytorch.utilities import rank_zero_only

    return getattr(rank_zero_only, "rank", 0) == 0


@contextlib.contextmanager
def env_restored(*names: str) -> Iterator[None]:
    """The environment variables ``names`` as they were before the block, whatever it set or removed."""
    previous = {name: os.environ.get(name) for name in names}
    try:
        yield
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def exported_run_dir(run_dir: Path) -> Iterator[None]:
    """Let ranks that Lightning launches during the block join ``run_dir`` (the variable is removed after)."""
    with env_restored(RUN_DIR_ENV):
        os.environ[RUN_DIR_ENV] = str(run_dir)
        yield


def record_rank_failure(run_dir: Path, error: str) -> None:
    """A rank > 0 that fails leaves why in ``run_dir/rank<N>.error`` (before its process exits, so before
    rank 0 sees the connection drop); rank 0 puts it first in ``run.json``. The first record stands: the
    run's own, not the command's report of the same error on its way out."""
    path = run_dir / f"rank{local_rank()}.error"
    if not path.exists():
        path.write_text(error)


def rank_failures(run_dir: Path) -> list[str]:
    """``rank N: error`` of every rank > 0 that failed in this attempt."""
    return [f"{p.stem}: {p.read_text(errors='replace').strip()}".replace("rank", "rank ", 1)
            for p in sorted(run_dir.glob("rank*.error"))]


def recorded_error(run_dir: Path, identity: dict) -> str:
    """Why the run in ``run_dir`` (``identity``: its ``run.json``) stopped: its recorded error, or else the
    errors its ranks > 0 left. Lightning SIGKILLs rank 0 when another rank's process exits with an error
    (``_ChildProcessObserver``); one that fails while rank 0 waits to connect leaves rank 0 no time to record
    it, and the run reads as stopped."""
    return identity.get("error") or "; ".join(rank_failures(run_dir))


def clear_rank_failures(run_dir: Path) -> None:
    for path in run_dir.glob("rank*.error"):
        path.unlink()


def local_processes(trainer_cfg: dict) -> int:
    """CPU training processes this run starts on this machine: ``devices`` of them for DDP on the CPU
    (``accelerator`` cpu, or auto without CUDA), else 1 (GPU ranks use their own device)."""
    import torch

    accelerator = trainer_cfg.get("accelerator", "auto")
    on_cpu = accelerator == "cpu" or (accelerator == "auto" and not torch.cuda.is_available())
    return device_count(trainer_cfg) if on_cpu else 1


def multi_device_rl_problem(cfg: dict) -> str | None:
    """Why this RL config cannot train on its ``trainer.devices`` (None when it can, or on one device).

    Multi-device RL is data parallel (``klear_lab.rl.data_parallel``): every rank holds the whole
    policy and generates with it, so only DDP strategies qualify, launched by re-running the command
    (not spawned). vLLM engines are refused: every rank would start one on the same GPU.
    """
    devices = device_count(cfg["trainer"])
    if devices <= 1:
        return None
    strategy, prompts = str(cfg["trainer"]["strategy"]), cfg["rl"]["prompts_per_step"]
    if not (strategy == "auto" or strategy.startswith("ddp")) or any(
            k in strategy for k in ("spawn", "fork", "notebook")):
        return (f"trainer.strategy={strategy!r}: RL on several devices is data parallel; every rank generates "
                "with the whole policy, so it needs trainer.strategy=ddp (FSDP, DeepSpeed and spawned "
                "processes are not supported for RL)")
    if strategy == "auto" and (hasattr(sys, "ps1") or sys.flags.interactive):
        return ("trainer.strategy='auto' in an interactive session (Jupyter, IPython): Lightning would fork the "
                f"{devices} ranks from this process (ddp_fork), and RL ranks run the command again instead. Run "
                "`klear-lab train EXPERIMENT trainer.strategy=ddp ...` from a shell")
    if cfg["rl"]["rollout"]["name"] == "vllm":
        return (f"rl.rollout=vllm with trainer.devices={cfg['trainer']['devices']!r}: every rank would start its "
                "own vLLM engine on the same GPU. Use trainer.devices=1 (rl.rollout.tensor_parallel_size spreads "
                "generation over GPUs) or rl.rollout=hf")
    if prompts % devices:
        return (f"rl.prompts_per_step={prompts} does not split evenly over trainer.devices={devices}: each rank "
                "generates for an equal share of the step's prompts")
    return None


def device_count(trainer_cfg: dict) -> int:
    """Devices (processes) Lightning trains on with this ``trainer`` section, on one machine."""
    devices = trainer_cfg.get("devices", 1)
    if isinstance(devices, (list, tuple)):
        return len(devices)
    if devices in ("auto", -1, "-1"):  # every visible GPU; one CPU process
        import torch

        return max(torch.cuda.device_count(), 1) if trainer_cfg.get("accelerator") != "cpu" else 1
    if isinstance(devices, str) and "," in devices:  # "0,1": device indices
        return len([d for d in devices.split(",") if d.strip()])
    return max(int(devices), 1)


def several_devices(trainer_cfg: dict) -> bool:
    """Whether Lightning would train on more than one device with this ``trainer`` section."""
    return device_count(trainer_cfg) > 1


def data_parallel(strategy) -> bool:
    """Whether every rank holds the whole model (DDP), so ranks may decode different problems.

    Under FSDP or DeepSpeed every forward pass gathers parameters from all ranks, so all ranks must
    decode the same sequences (as before sharding existed): evaluation is then not split.
    """
    from lightning.pytorch.strategies import DDPStrategy

    return isinstance(strategy, DDPStrategy) and not type(strategy).__name__.startswith("DeepSpeed")


def rank_and_world(module) -> tuple[int, int]:
    """(rank, ranks) over which a LightningModule's data-parallel work splits: (0, 1) when it is not
    attached to a trainer or the strategy is not DDP (see :func:`data_parallel`)."""
    trainer = module._trainer
    if trainer is None or not data_parallel(trainer.strategy) or trainer.world_size <= 1:
        return 0, 1
    return module.global_rank, trainer.world_size
