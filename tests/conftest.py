"""Test-wide settings: offline hubs, offline W&B, deliberate torch threads."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    # started in the background (`scripts/test.sh &`, nohup): SIGINT is ignored and the processes the tests
    # start inherit that, so the Ctrl-C tests' runs finished instead of stopping. A handler is reset by exec.
    signal.signal(signal.SIGINT, signal.default_int_handler)

from klear_lab.hardware import cpu_cores  # noqa: E402 - no heavy imports (torch is set up below)


def _test_threads() -> int:
    """Torch threads of each test process: ``KLEAR_TEST_THREADS``, else the cores divided among the
    pytest-xdist workers (``-n N``), so parallel test processes never oversubscribe the cores
    (environment.md: two processes with 2 threads each on 2 cores run 3x slower than one)."""
    if os.environ.get("KLEAR_TEST_THREADS", "").isdigit():
        return max(int(os.environ["KLEAR_TEST_THREADS"]), 1)
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    return max(cpu_cores() // workers, 1)


TEST_THREADS = _test_threads()
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:
    os.environ.setdefault("OMP_NUM_THREADS", str(TEST_THREADS))  # runs a test starts stay under the share too
    if (os.environ.get("COLUMNS"), os.environ.get("LINES")) == ("80", "24"):  # what xdist workers start with:
        del os.environ["COLUMNS"], os.environ["LINES"]  # tables print as in a plain pytest process (no tty)

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(TEST_THREADS)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def repo_root() -> str:
    return REPO


def _klear_cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    """``python -m klear_lab.cli ARGS`` in a fresh process from the repository root, offline, without
    the DDP rank variables of any enclosing run (Lightning relaunches it with its own)."""
    base = {k: v for k, v in os.environ.items() if k not in ("LOCAL_RANK", "KLEAR_RUN_DIR")}
    return subprocess.run([sys.executable, "-m", "klear_lab.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=600, env={**base, "HF_HUB_OFFLINE": "1", "COLUMNS": "200", **env})


@pytest.fixture
def klear_cli():
    """:func:`_klear_cli`: run the CLI as a user would, in its own process."""
    return _klear_cli


@pytest.fixture
def tiny_sft_overrides(tmp_path) -> list[str]:
    """Overrides that make the quickstart SFT run in a few seconds."""
    return [f"run.out_dir={tmp_path / 'runs'}", "data.sources.0.n_prompts=120", "sft.max_steps=3",
            "data.eval_sources.0.n_prompts=8", "eval.max_new_tokens=24", "trainer.checkpoint=false",
            "sft.tokens_per_micro_batch=1000", "trainer.log_every_n_steps=1"]


def _reference_greedy(model, tokenizer, prompts: list[str], max_new_tokens: int) -> list[str]:
    """Greedy completions the plainest way: one prompt at a time, no padding, no KV cache, argmax of a
    full forward pass per token. The oracle the batched engines are checked against."""
    from klear_lab.data.sft import prompt_ids
    from klear_lab.rl.rollout.base import decode_response, eos_token_ids

    stops = eos_token_ids(tokenizer)  # the eos and the chat template's turn end, where they differ
    out = []
    with torch.no_grad():
        for prompt in prompts:
            ids, new = prompt_ids(tokenizer, prompt), []
            while len(new) < max_new_tokens and (not new or new[-1] not in stops):
                logits = model(torch.tensor([ids + new])).logits[0, -1]  # [V]
                new.append(int(logits.argmax()))
            out.append(decode_response(tokenizer, new, stops))
    return out


@pytest.fixture
def reference_greedy():
    return _reference_greedy


def _tiny_lm(n_records: int):
    """A seeded tiny Qwen2 (2m) with a tokenizer trained on 30 arithmetic records, and the first
    ``n_records`` of them: the model evaluation tests decode with."""
    from klear_lab.models.tokenizer import train_tokenizer
    from klear_lab.registry import MODEL, SOURCE

    recs = SOURCE.build({"name": "arith_r1", "n_prompts": 30}).records(0, "train")
    tok = train_tokenizer([r.prompt + r.response for r in recs], vocab_size=300)
    torch.manual_seed(0)
    model = MODEL.build({"name": "qwen2", "size": "2m"}).build(tok)
    return tok, model, recs[:n_records]


@pytest.fixture(scope="session")
def make_tiny_lm():
    return _tiny_lm


@pytest.fixture
def registries_restored():
    """The component registries as they were before the test (the built-ins loaded first, so restoring keeps
    them): a plugin a test registers is gone for the worker's later tests. One whose component raises when
    called would stop a later test that asks every registered clip its statistics, and one test module's plugin
    file would collide with another's registering the same name."""
    from klear_lab.registry import REGISTRIES

    for registry in REGISTRIES.values():
        registry.load_builtins()
    before = {axis: registry.snapshot() for axis, registry in REGISTRIES.items()}
    yield
    for axis, entries in before.items():
        REGISTRIES[axis].restore(entries)
