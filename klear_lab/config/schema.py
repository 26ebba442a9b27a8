"""The experiment schema: every key, its type and its default.

Component nodes (``component(axis, name)``) hold ``{name: ..., **params}``; their allowed keys
and defaults come from the registered dataclass, so they are checked and expanded after the
name is final. Layers compose over these defaults (see ``compose.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


def component(axis: str, name: str, **params: Any) -> Any:
    """A field holding one component node of ``axis``."""
    return field(default_factory=lambda: {"name": name, **params}, metadata={"axis": axis})


def components(axis: str, *nodes: dict[str, Any]) -> Any:
    """A field holding a list of component nodes of ``axis``."""
    return field(default_factory=lambda: [dict(n) for n in nodes], metadata={"axis": axis, "many": True})


@dataclass
class RunSection:
    name: str = "run"
    """Run name prefix; the run id adds a timestamp. Used as W&B job name."""
    kind: str = "sft"
    """Stage: ``sft``, ``rl`` or ``eval`` (score a trained model only: ``klear-lab eval RUN_DIR``)."""
    seed: int = 0
    """The replicate's seed: tiny-model init, the mix's draw, RL prompt order, rollout and eval sampling (the
    data itself: ``data.world_seed``). Not in the config hash: replicates of one config share it."""
    experiment: str = ""
    """The experiment file this config was composed from (filled in by ``compose``)."""
    out_dir: str = "runs"
    """Parent folder of run directories."""
    group: str | None = None
    """W&B group (default: experiment name); sweeps set the sweep name."""
    job_type: str | None = None
    """W&B job_type (default: the stage, or the sweep arm)."""
    tags: list[str] = field(default_factory=list)
    """W&B tags, after which the run adds ``kind:``, ``seed:`` and component tags (``clip:gppo``...)."""
    notes: str = ""
    """W&B run notes; a sweep writes ``sweep NAME trial N`` here (its retries find a trial's runs by it)."""


@dataclass
class ModelSection:
    name_or_path: str | None = None
    """Local HF causal-LM directory, hub id (online only), or a klear-lab run directory."""
    init_from: str | None = None
    """An experiment YAML whose completed run (same config hash) provides the model; it is run
    first if no such run exists. E.g. RL starting from ``experiments/quickstart/sft.yaml``."""
    tiny: dict = component("model", "qwen2", size="2m")
    """Architecture built from config when ``name_or_path`` is null."""
    tokenizer_vocab: int = 512
    """Vocabulary size of the locally trained tokenizer (tiny models only; at least 263: 256 bytes + 7 special)."""
    dtype: str = "float32"
    """torch dtype the model is built or loaded in (``float32``, ``bfloat16``...); a ``*-true``
    ``trainer.precision`` converts it for training, ``*-mixed`` keeps it (autocast lowers the compute only)."""
    attn_implementation: str = "sdpa"
    """transformers' attention kernel: ``sdpa``, ``eager``, ``flash_attention_2`` (packed SFT then needs one
    row per micro-batch: ``sft.tokens_per_micro_batch`` = ``data.max_length``)."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (transformers' gradient checkpointing): less memory, more
    compute."""


@dataclass
class DataSection:
    sources: list = components("source", {"name": "arith_r1"})
    mix: dict = component("data_mix", "all")
    filter: dict = component("difficulty_filter", "none")
    eval_sources: list = components("source", {"name": "arith", "levels": [1], "level_weights": [1.0],
                                               "n_prompts": 200})
    """Held-out sets (their ``eval`` split) scored with the task's verifier (decoding: the ``eval`` section)."""
    decontaminate_ngram: int = 0
    """Drop training records whose prompt shares a run of this many words with a held-out prompt of
    ``eval_sources``, before ``filter`` and ``mix``; 0 = off. The paper removes training prompts with a
    9-gram test-set overlap (arXiv 2508.07629, paper.md §6). Words are lowercased runs of letters and
    digits; a held-out source's prompt template is not matched (klear_lab/data/decontaminate.py). Logged
    as ``data/decontam_dropped`` and ``data/decontam_dropped_from/<source>``."""
    world_seed: int = 0
    """Seed of the embedded task world (fixed across run seeds, so replicates share data)."""
    max_length: int = 512
    """Longest SFT sequence (prompt + response) in tokens; longer records are dropped and counted."""
    pack: bool = True
    """Best-fit-decreasing packing with per-sequence position ids."""


@dataclass
class OptimSection:
    lr: float = 1e-3
    """Peak AdamW learning rate, reached after warmup (paper: SFT 8e-5; RL 1e-6 math, 5e-7 code)."""
    min_lr: float = 1e-4
    """Cosine floor (the paper's SFT: 8e-5 -> 4e-5)."""
    warmup_steps: int = 30
    """Linear warmup length: SFT optimizer steps; in RL updates or rollout steps as ``rl.lr_schedule_unit`` says
    (paper RL: 10 rollout steps)."""
    weight_decay: float = 0.0
    """AdamW's decoupled weight decay, on matrices only (not on biases or norm weights; paper RL: 0.1)."""
    betas: list[float] = field(default_factory=lambda: [0.9, 0.95])
    """AdamW's [beta1, beta2], each in [0, 1): decay rates of the gradient's first and second moments."""
    grad_clip: float = 1.0
    """Clip the gradient's global L2 norm to this before each optimizer step (SFT step, RL update); 0 = no
    clipping (paper RL: 1.0)."""
    schedule: str = "cosine"
    """``cosine`` (warmup then cosine to min_lr) or ``constant`` (warmup then flat; the paper's RL)."""
    bf16_rounding: str = "stochastic"
    """How AdamW stores bfloat16 weights and moments (``trainer.precision=bf16-true``): ``stochastic``
    keeps small steps right on average (at lr 1e-6 rounding to ``nearest`` loses nearly all of them;
    klear_lab/modules/bf16_adamw.py). No effect on float32 weights."""


@dataclass
class SFTSection:
    epochs: float = 1.0
    """Passes over the SFT examples (a fraction: that share of an epoch's steps, rounded up); read when
    ``sft.max_steps`` is not > 0 (paper: 4)."""
    max_steps: int = -1
    """Optimizer steps; 0 or -1 = derived from ``sft.epochs``."""
    tokens_per_micro_batch: int = 2048
    """Packed rows of ``data.max_length`` per micro-batch = this // max_length."""
    grad_accum: int = 1
    """Micro-batches per optimizer step (Lightning's gradient accumulation)."""
    loss: str = "token-mean"
    """``token-mean``: each micro-batch's mean over its response tokens, averaged over the
    ``grad_accum`` micro-batches and the ranks (Lightning's accumulation, DDP's mean): a micro-batch
    with few response tokens weighs each of them more, so ``grad_accum`` 2 x 1 row is not 1 x 2 rows.
    ``step-token-mean``: the mean over every response token of the optimizer step (all micro-batches
    and ranks), the same step whatever the split (what transformers' Trainer does since 4.46)."""


@dataclass
class RLSection:
    """GRPO-style RL. Defaults are CPU-sized; the paper's recipe is experiments/paper/rl/*.yaml."""

    clip: dict = component("clip", "gppo")
    aggregation: dict = component("aggregation", "token-mean")
    advantage: dict = component("advantage", "grpo")
    group_filter: dict = component("group_filter", "zero_variance")
    reward: dict = component("reward", "math_verify")
    rollout: dict = component("rollout", "hf")
    steps: int = 40
    """Rollout steps (each: generate, score, then several minibatch updates)."""
    prompts_per_step: int = 16
    """B: prompts per rollout batch (paper: 128)."""
    group_size: int = 8
    """G: responses per prompt (paper: 8)."""
    minibatch_prompts: int = 4
    """Prompts per optimizer update; B / this = updates per rollout batch (paper: 16 -> 8 updates)."""
    max_kept_prompts: int = 0
    """Train on at most this many of the groups the filter keeps, the first in generation order (0: all).
    The paper's official scripts generate 256 prompts and train on the first 128 that survive (paper.md §4.4;
    so every step takes 8 full updates, not a short last one of a few groups)."""
    micro_batch_seqs: int = 0
    """Sequences per forward/backward (gradient accumulation inside an update); 0 = whole minibatch."""
    logp_chunk_tokens: int = 0
    """Run the LM head and log-softmax this many response tokens at a time, recomputed in backward: the
    same log-probs in [seqs, chunk, V] memory instead of [seqs, T, V] float32 (about 20 GB per 32K-token
    Qwen3 response); 0 = all at once. ``scripts/bench_logp_chunks.py`` measures it."""
    ppo_epochs: int = 1
    """Passes over each rollout batch's kept groups, one update per ``minibatch_prompts`` of them each pass
    (paper: 1)."""
    max_new_tokens: int = 128
    """Rollout response budget in tokens; a response still going there is cut (truncated: ``rl.overlong``;
    paper: 32K)."""
    max_prompt_tokens: int = 0
    """Drop training prompts longer than this many tokens (chat-formatted) before the run; 0 = keep all
    (paper: 4K prompts; verl's ``data.max_prompt_length`` with ``filter_overlong_prompts``)."""
    temperature: float = 1.0
    """Rollout sampling temperature, > 0; the loss's log-probs use the same tempered softmax (paper: 1.0)."""
    top_p: float = 1.0
    """Rollout nucleus sampling; only 1 (off, the paper's) is accepted: the PPO ratio would be off-policy."""
    lr_schedule_unit: str = "update"
    """What the LR schedule counts (``optim.warmup_steps``, the cosine's length): ``update`` (each optimizer
    update; the schedule assumes every group is kept) or ``rollout_step`` (verl's, which the paper's recipe runs
    on: its 10 warmup steps are then 10 rollout steps, paper.md §4.4 not stating the unit; groups a filter
    drops do not stretch the schedule)."""
    alpha: float = 0.1
    """Weight of the SFT loss on fully correct rollouts (paper Eq. 13: 0.1)."""
    entropy_coef: float = 0.0
    """Weight of the entropy bonus (the loss subtracts it times the aggregated entropy; 0: none, as the
    official code's ``entropy_coeff=0``, paper.md §1.4). A negative value penalises entropy instead;
    ``rl/entropy`` is logged as a per-token mean either way."""
    kl_coef: float = 0.0
    """Weight of the KL-to-reference loss term (0: no reference model is kept; the paper's RL uses none)."""
    kl_estimator: str = "k3"
    """``k1``/``k2``/``k3`` (or verl ``kl``/``mse``/``low_var_kl``). As a loss term k3's gradient is that of
    KL(ref || pi), k2's that of KL(pi || ref), and k1's averages to 0 (noise, no pull: warned)."""
    overlong: str = "none"
    """``none``, ``mask`` (truncated responses leave the loss) or ``penalty`` (DAPO soft overlong)."""
    overlong_buffer: int = 32
    """``rl.overlong=penalty``: the last this many tokens before ``rl.max_new_tokens``, over which the penalty
    grows linearly from 0 to ``rl.overlong_penalty`` (DAPO's L_cache); in (0, rl.max_new_tokens]. Unused otherwise."""
    overlong_penalty: float = 1.0
    """``rl.overlong=penalty``: what a response reaching ``rl.max_new_tokens`` loses from its reward (DAPO's
    factor: 1.0), >= 0. Unused otherwise; the paper uses no overlong penalty."""
    eval_every: int = 10
    """Held-out evaluation (``eval``: greedy or avg@k) every N rollout steps, and before the first and after the
    last; 0 = before the first and after the last only."""


@dataclass
class EvalSection:
    every_n_steps: int = 0
    """Validation interval in optimizer steps; 0 = at the end only."""
    max_new_tokens: int = 160
    """Longest held-out completion in tokens (paper: 32K)."""
    batch_size: int = 100
    """Sequences per ``generate`` call (a problem's ``samples`` count as that many)."""
    samples: int = 1
    """Completions per held-out problem; ``val/acc`` is their mean pass@1, the paper's avg@k
    (avg@32 on AIME, avg@4 on LiveCodeBench in its ablations). More than 1 needs a temperature."""
    samples_per_source: dict | None = field(default_factory=dict)
    """Source name -> completions per problem for that held-out source (a file source's ``label``),
    over ``samples``: the paper's main table is avg@64 on AIME/HMMT but avg@8 on LiveCodeBench.
    ``null`` clears what an earlier layer set (evaluating a run on other sources)."""
    temperature: float = 0.0
    """0 = greedy decoding; the paper evaluates at 0.6."""
    top_p: float = 1.0
    """Nucleus sampling for ``temperature`` > 0; the paper uses 0.95."""
    top_k: int = 0
    """Sample among the k most likely tokens for ``temperature`` > 0; 0 = off. The paper's released
    eval script (``benchmarks/inference.py``) uses 20."""
    repetition_penalty: float = 1.0
    """transformers/vLLM repetition penalty over the prompt and response; 1 = off. The released eval
    script uses 1.05."""
    engine: str = "generate"
    """``generate`` (transformers, ``batch_size`` per call) or ``rollout``: the run's rollout engine
    (``rl.rollout``, e.g. vLLM; in RL the same running engine), what paper-scale avg@k needs."""
    reward: dict = component("reward", "math_verify")
    code_reward: dict = component("reward", "code")


@dataclass
class TrainerSection:
    accelerator: str = "auto"
    """Lightning's accelerator: ``auto`` (a GPU when one is visible), ``cpu``, ``gpu``/``cuda``."""
    devices: Any = 1
    """Lightning's devices on this machine: a count, GPU indices (``[0, 1]``, ``"0,1"``) or ``auto``; more than
    one runs one process each (``trainer.strategy``)."""
    strategy: str = "auto"
    """Passed to Lightning: ``ddp``, ``fsdp``, ``deepspeed_stage_2``... on GPUs."""
    precision: str = "32-true"
    """Lightning's precision: ``32-true``, ``bf16-mixed``/``16-mixed`` (autocast; weights stay in
    ``model.dtype``), ``bf16-true``/``16-true`` (weights, gradients and AdamW states in that dtype)..."""
    num_threads: int = 0
    """torch threads of the run; 0 = cores // parallel workers (KLEAR_PARALLEL_WORKERS), at most
    ``OMP_NUM_THREADS`` where it is set. A CPU DDP
    run's processes share them (each gets num_threads // devices)."""
    log_every_n_steps: int = 5
    """Log training metrics every N SFT optimizer steps (RL logs every rollout step); 0 = no step logging."""
    checkpoint: bool = True
    """Write resume checkpoints (every ``trainer.checkpoint_every``); false: none. The final model is saved
    either way."""
    checkpoint_every: int = 50
    """Write ``checkpoints/last.ckpt`` every this many steps (SFT: optimizer steps; RL: rollout steps),
    so ``klear-lab resume RUN_DIR`` continues a stopped run where it left off. 0: no checkpoints."""
    compile: bool = False
    """``torch.compile`` the SFT training forward (evaluation and RL rollouts stay eager). On the
    2-core CPU it measured no faster for the 2m model (6.0k vs 6.2k tok/s) after a 40 s compile."""


@dataclass
class WandbSection:
    enabled: bool = True
    """false: no W&B logging (as ``tracking.wandb.mode=disabled``)."""
    mode: str = "offline"
    """``offline`` (default: no account; ``wandb sync`` later), ``online`` or ``disabled``."""
    project: str = "klear-lab"
    """W&B project the run logs to (no ``/``: a team goes in ``entity``)."""
    entity: str | None = None
    """W&B team or user the project belongs to; null = the logged-in user's default."""
    log_samples: int = 8
    """Sample generations logged as a W&B table at each evaluation."""


@dataclass
class TrackingSection:
    wandb: WandbSection = field(default_factory=WandbSection)
    csv: bool = True
    """Log metrics to ``RUN_DIR/csv/metrics.csv`` (what ``klear-lab compare``, ``runs`` and ``resume`` read)."""


@dataclass
class ExperimentConfig:
    plugins: list[str] = field(default_factory=list)
    """Modules or ``.py`` files imported before the run is built (they register components)."""
    run: RunSection = field(default_factory=RunSection)
    model: ModelSection = field(default_factory=ModelSection)
    data: DataSection = field(default_factory=DataSection)
    optim: OptimSection = field(default_factory=OptimSection)
    sft: SFTSection = field(default_factory=SFTSection)
    rl: RLSection = field(default_factory=RLSection)
    eval: EvalSection = field(default_factory=EvalSection)
    trainer: TrainerSection = field(default_factory=TrainerSection)
    tracking: TrackingSection = field(default_factory=TrackingSection)
