"""The real engine's model on this machine: a tiny Qwen3-MoE with random weights, made offline (``engine: vllm`` on a
local CPU pool, ``benchctl.local.vllm_worker``).

vLLM's CPU build must load real weights, and nothing may be downloaded. So the set-up writes one: the architecture of
the campaign's model (``Qwen3MoeForCausalLM``: attention with q/k norms, a top-k router over experts in every layer),
a handful of layers and experts of a few dozen dimensions, initialised by transformers' own ``_init_weights`` from a
fixed seed, saved as bf16 safetensors beside the offline Qwen3 tokenizer the mocker and AIPerf already use
(``benchctl.local.modeldir``). It computes nonsense fast: every figure it yields times a CPU, not a GPU, and is
labelled SIMULATED (CPU engine); AIPerf asks for ``ignore_eos`` so the requested output lengths are produced anyway.

The directory lives in the engine environment (``.venv-engine/share/benchctl/engine-model``), made by
``scripts/setup_engine.sh`` with the engine environment's torch and transformers, so it goes with that venv.
CLI: ``python -m benchctl.local.engine_model --install`` (idempotent) prints the path.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchctl.local import modeldir

ROOT = Path(__file__).resolve().parents[2]
ENGINE_VENV = ROOT / ".venv-engine"
ENGINE_PYTHON = ENGINE_VENV / "bin" / "python"
SEED = 20261205
_COMPLETE = ".benchctl-complete"
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json")

# The campaign model's architecture and tokenizer (modeldir.MODEL_CONFIG: Qwen3-30B-A3B), at a size a CPU serves in
# milliseconds: 2 layers, 8 experts (2 per token), head_dim 64 (a size vLLM's CPU attention supports).
ENGINE_MODEL_CONFIG: dict[str, Any] = {
    **modeldir.MODEL_CONFIG,
    "hidden_size": 128,
    "intermediate_size": 256,
    "moe_intermediate_size": 64,
    "num_hidden_layers": 2,
    "max_window_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "max_position_embeddings": 4096,
}

# Runs in the engine environment (its torch and transformers): the weights, from the config, by transformers' own
# initialisation, with a fixed seed
_WRITE_WEIGHTS = r"""
import sys, torch
from transformers import AutoConfig, AutoModelForCausalLM
torch.manual_seed(int(sys.argv[2]))
config = AutoConfig.from_pretrained(sys.argv[1])
model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.bfloat16)
model.save_pretrained(sys.argv[1], safe_serialization=True)
print(type(model).__name__, sum(p.numel() for p in model.parameters()))
"""


def path() -> Path:
    return ENGINE_VENV / "share" / "benchctl" / "engine-model"


def is_complete() -> bool:
    return (path() / _COMPLETE).is_file()


def ensure(python: Path = ENGINE_PYTHON) -> Path:
    """Write the directory if it is missing (atomically: a directory renamed into place when whole)."""
    final = path()
    if is_complete():
        return final
    if not python.exists():
        raise FileNotFoundError(f"{python} is missing: the engine environment is made by scripts/setup_engine.sh "
                                "(make engine-env)")
    tokenizer = modeldir.ensure_model_dir()
    with modeldir.staged(final) as tmp:
        for name in _TOKENIZER_FILES:
            shutil.copy2(tokenizer / name, tmp / name)
        (tmp / "config.json").write_text(json.dumps(ENGINE_MODEL_CONFIG, indent=2) + "\n")
        proc = subprocess.run([str(python), "-c", _WRITE_WEIGHTS, str(tmp), str(SEED)], check=False,
                              capture_output=True, text=True, timeout=600,
                              env={"PATH": "/usr/bin:/bin", "HOME": str(tmp), "HF_HUB_OFFLINE": "1",
                                   "TRANSFORMERS_OFFLINE": "1"})
        if proc.returncode != 0 or not (tmp / "model.safetensors").is_file():
            raise RuntimeError(f"writing the engine model's weights failed (exit {proc.returncode}): "
                               f"{proc.stderr[-2000:]}")
        (tmp / _COMPLETE).write_text(proc.stdout.strip().splitlines()[-1] + "\n")
    return final


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchctl.local.engine_model", description=__doc__.split("\n")[0])
    parser.add_argument("--install", action="store_true", help="write the directory if missing")
    args = parser.parse_args(argv)
    if args.install:
        print(ensure())
        return 0
    if not is_complete():
        print(f"not written yet: {path()} (run with --install)", file=sys.stderr)
        return 1
    print(path())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
