"""AdamW under sharding strategies: weight decay by the unwrapped model's shapes, independent noise per shard."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
from types import SimpleNamespace

from lightning.pytorch.strategies import DDPStrategy

from klear_lab.modules.bf16_adamw import noise_seed
from klear_lab.modules.optim import noise_stream

FSDP_SCRIPT = textwrap.dedent('''
    import os, sys
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp

    def main(rank, world, port):
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        torch.set_num_threads(1)
        dist.init_process_group("gloo", rank=rank, world_size=world)
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from klear_lab.modules.optim import OptimSettings, configure_adamw, parameter_ndims
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.LayerNorm(5), torch.nn.Linear(5, 3))
        ndims = parameter_ndims(model)
        wrapped = FSDP(model, use_orig_params=True, device_id=torch.device("cpu"))
        s = OptimSettings(lr=1e-3, min_lr=0, warmup_steps=0, total_steps=1, weight_decay=0.1, betas=(0.9, 0.95))
        groups = configure_adamw(wrapped, s, ndims)["optimizer"].param_groups
        by_shape = configure_adamw(wrapped, s)["optimizer"].param_groups
        names = {id(p): n for n, p in wrapped.named_parameters()}
        decayed = sorted(".".join(names[id(p)].split(".")[-2:]) for p in groups[0]["params"])
        # what the weights look like now (1-D), and how many a choice by their shapes now would decay
        print(rank, decayed, len(by_shape[0]["params"]), max(p.ndim for p in wrapped.parameters()), flush=True)
        dist.destroy_process_group()

    if __name__ == "__main__":
        mp.spawn(main, args=(2, int(sys.argv[1])), nprocs=2)
''')


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_fsdp_shards_keep_weight_decay_on_the_matrices(tmp_path):
    """FSDP hands ``configure_optimizers`` 1-D shards: every weight looked like a bias, and weight decay
    (optim.weight_decay, 0.1 in the paper's SFT) was silently off under trainer.strategy=fsdp."""
    script = tmp_path / "fsdp_decay.py"
    script.write_text(FSDP_SCRIPT)
    done = subprocess.run([sys.executable, str(script), str(_free_port())], capture_output=True, text=True,
                          timeout=300, env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    lines = sorted(line for line in done.stdout.splitlines() if line[:1] in "01")
    assert lines == ["0 ['0.weight', '2.weight'] 0 1", "1 ['0.weight', '2.weight'] 0 1"], done.stdout


def test_sharded_ranks_draw_their_own_rounding_noise():
    ddp = SimpleNamespace(world_size=2, global_rank=1, strategy=DDPStrategy())
    fsdp = SimpleNamespace(world_size=2, global_rank=1, strategy=object())  # any strategy that shards
    one = SimpleNamespace(world_size=1, global_rank=0, strategy=object())
    assert (noise_stream(ddp), noise_stream(fsdp), noise_stream(one)) == (0, 1, 0)
    seeds = {noise_seed(0, stream, step) for stream in (0, 1) for step in (1, 2)}
    assert len(seeds) == 4 and all(0 <= s < 2**63 for s in seeds)
