"""klear-lab: ablation platform for reasoning post-training (long-CoT SFT, GRPO-style RL with GPPO)."""

__version__ = "0.1.0"
