"""Convert a GGUF file of the Llama family into a Hugging Face folder in the user cache.

Architectures (``general.architecture``): ``llama`` (Mistral files are ``llama`` too, told apart
by their ``general.name``, as transformers does), ``qwen2`` and ``qwen3``. The libraries that
already know GGUF do the naming: config keys come from transformers' ``GGUF_CONFIG_MAPPING``,
tensor names from the ``gguf`` package's per-architecture name map, the tokenizer from
transformers' GGUF support. Each tensor is dequantized to float32 (``gguf.quants``), llama's Q/K
row interleaving is undone, and the result is saved as ``model.safetensors`` next to a
``config.json`` and the tokenizer; later loads read that folder in well under a second.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from agentrt.models.config import UnsupportedModelError

__all__ = ["GGUF_ARCHITECTURES", "convert_gguf"]

#: GGUF ``general.architecture`` -> the Hugging Face architecture it converts to
GGUF_ARCHITECTURES: dict[str, str] = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
}
_PERMUTED_QK = frozenset({"llama"})  # llama.cpp interleaves rotary halves of Q/K rows for these


def convert_gguf(gguf_path: Path, out_dir: Path) -> Path:
    """Write a Hugging Face model folder for ``gguf_path`` into ``out_dir`` and return it.

    Raises :class:`~agentrt.models.config.UnsupportedModelError` for other architectures.
    Writes into a temporary sibling folder first and renames it at the end, so an interrupted
    conversion never leaves a half-written cache entry behind.
    """
    import gguf
    from tqdm.auto import tqdm

    reader = gguf.GGUFReader(str(gguf_path))
    meta = _metadata(reader)
    arch = str(meta.get("general.architecture"))
    if arch not in GGUF_ARCHITECTURES:
        raise UnsupportedModelError(
            f"{gguf_path.name}: GGUF architecture {arch!r} is not supported; agentrt converts "
            f"{', '.join(sorted(GGUF_ARCHITECTURES))} (Mistral files are 'llama')"
        )
    config = _config(meta, arch)
    names = _hf_names(gguf, arch, config["num_hidden_layers"])
    tmp = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    tensors = {}
    bar = tqdm(reader.tensors, desc=f"agentrt: converting {gguf_path.name}", unit="tensor")
    for t in bar:
        if t.name not in names:
            raise UnsupportedModelError(f"{gguf_path.name}: unexpected GGUF tensor {t.name!r}")
        tensors[names[t.name]] = _dequantize(t, config, gguf, permute=arch in _PERMUTED_QK)
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


def _config(meta: dict, arch: str) -> dict[str, Any]:
    """config.json from the GGUF metadata, keys named by transformers' GGUF_CONFIG_MAPPING."""
    from transformers.integrations.ggml import GGUF_CONFIG_MAPPING

    config: dict[str, Any] = {}
    for section, prefix in ((arch, f"{arch}."), ("tokenizer", "tokenizer.")):
        for key, hf_key in GGUF_CONFIG_MAPPING[section].items():
            if hf_key is not None and prefix + key in meta:
                config[hf_key] = meta[prefix + key]
    heads = int(config["num_attention_heads"])
    head_dim = meta.get(f"{arch}.attention.key_length") or meta.get(f"{arch}.rope.dimension_count")
    hf_arch = GGUF_ARCHITECTURES[arch]
    if arch == "llama" and "mistral" in str(meta.get("general.name", "")).lower():
        hf_arch = "MistralForCausalLM"
    config.update(
        architectures=[hf_arch],
        model_type=hf_arch.removesuffix("ForCausalLM").lower(),
        num_key_value_heads=int(config.get("num_key_value_heads") or heads),
        head_dim=int(head_dim or int(config["hidden_size"]) // heads),
        rope_theta=float(config.get("rope_theta", 10000.0)),
        rms_norm_eps=float(config["rms_norm_eps"]),
        vocab_size=int(config.get("vocab_size") or 0) or None,
        tie_word_embeddings=False,
        torch_dtype="float32",
        attention_bias=arch == "qwen2",
        mlp_bias=False,
        hidden_act="silu",
    )
    return config


def _hf_names(gguf, arch: str, num_layers: int) -> dict[str, str]:
    """GGUF tensor name -> Hugging Face name, through the gguf package's name map."""
    name_map = gguf.get_tensor_name_map(gguf.MODEL_ARCH[arch.upper()], num_layers)
    hf = ["model.embed_tokens", "model.norm", "lm_head"]
    for i in range(num_layers):
        layer = f"model.layers.{i}."
        hf += [layer + n for n in (
            "input_layernorm", "post_attention_layernorm", "self_attn.q_proj", "self_attn.k_proj",
            "self_attn.v_proj", "self_attn.o_proj", "self_attn.q_norm", "self_attn.k_norm",
            "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")]
    names = {}
    for base in hf:
        gguf_base = name_map.get_name(base)
        if gguf_base is not None:
            for suffix in (".weight", ".bias"):
                names[gguf_base + suffix] = base + suffix
    return names


def _dequantize(t, config: dict, gguf, *, permute: bool) -> np.ndarray:
    w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
    w = w.reshape([int(d) for d in reversed(t.shape)])  # GGUF lists dims innermost-first
    if permute and ".attn_q." in t.name:
        w = _unpermute(w, config["num_attention_heads"])
    elif permute and ".attn_k." in t.name:
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
