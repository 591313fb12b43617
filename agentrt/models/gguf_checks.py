"""What a GGUF file's metadata and tensors must be before any byte reaches the C kernels.

The kernels read weight bytes through raw pointers, so :class:`~agentrt.models.gguf_file.GGUFFile`
checks here, after parsing: the sizes in the metadata are positive, bounded and consistent
(:func:`check_config`), every weight the forward pass reads is there with the shape they imply
(:func:`check_tensors`; that each is whole blocks inside the file,
:mod:`~agentrt.models.gguf_header` checked), and the vocabulary fits the embedding
(:func:`check_tokens`). Each failure is a ``ValueError`` naming the file, the tensor or key,
and what was expected.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentrt.models.gguf_moe import moe_shapes

if TYPE_CHECKING:
    from agentrt.models.gguf_file import GGUFTensor

__all__ = ["MAX_CONTEXT", "check_config", "check_tensors", "check_tokens"]

MAX_CONTEXT = 1 << 24  # 16M positions: above any released model's context
MAX_SIZE = 1 << 20  # hidden, intermediate, head sizes: far above any Llama-family model's
MAX_LAYERS = 1 << 12


def check_config(path: Path, config: dict[str, Any]) -> None:
    """Sizes the forward pass divides by and allocates from: positive, bounded, consistent."""
    def bad(why: str) -> ValueError:
        return ValueError(f"{path}: invalid GGUF model metadata: {why}")

    sizes = {"hidden_size": MAX_SIZE, "intermediate_size": MAX_SIZE,
             "num_attention_heads": MAX_SIZE, "num_key_value_heads": MAX_SIZE,
             "head_dim": MAX_SIZE, "num_hidden_layers": MAX_LAYERS,
             "max_position_embeddings": MAX_CONTEXT, "sliding_window": MAX_CONTEXT}
    optional = ("max_position_embeddings", "sliding_window")  # transformers has defaults
    for key, most in sizes.items():
        value = config.get(key)
        if value is None and key in optional:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= most:
            raise bad(f"{key} = {value!r} (expected an integer from 1 to {most})")
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    if heads % kv_heads:
        raise bad(f"{heads} attention heads are not a multiple of {kv_heads} key/value heads")
    if config["head_dim"] % 2:
        raise bad(f"head_dim = {config['head_dim']} (RoPE rotates pairs: it must be even)")
    theta, eps = config["rope_theta"], config["rms_norm_eps"]
    if not (math.isfinite(theta) and theta > 0):
        raise bad(f"rope_theta (rope.freq_base) = {theta} (expected a positive number)")
    if not (math.isfinite(eps) and 0 <= eps < 1):
        raise bad(f"rms_norm_eps = {eps} (expected a small non-negative number)")


def _expected_shapes(config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """The shape the forward pass needs of each weight (HF names), from the config."""
    h, f, d = config["hidden_size"], config["intermediate_size"], config["head_dim"]
    q, kv = config["num_attention_heads"] * d, config["num_key_value_heads"] * d
    shapes: dict[str, tuple[int, ...]] = {"model.norm.weight": (h,)}
    if config.get("vocab_size"):
        shapes["model.embed_tokens.weight"] = shapes["lm_head.weight"] = (config["vocab_size"], h)
    rows = {"self_attn.q_proj": q, "self_attn.k_proj": kv, "self_attn.v_proj": kv,
            "self_attn.qkv_proj": q + 2 * kv, "mlp.gate_proj": f, "mlp.up_proj": f,
            "mlp.gate_up_proj": 2 * f}
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes.update({p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight":
                       (h,), p + "self_attn.q_norm.weight": (d,), p + "self_attn.k_norm.weight":
                       (d,), p + "self_attn.o_proj.weight": (h, q), p + "mlp.down_proj.weight":
                       (h, f)})
        for name, n in rows.items():
            shapes[p + name + ".weight"], shapes[p + name + ".bias"] = (n, h), (n,)
        shapes.update(moe_shapes(config, i))
    return shapes


def _required(config: dict[str, Any], arch: str, fused: bool) -> list[str]:
    """The weights every layer of ``arch`` needs (the output head may be tied)."""
    per_layer = ["input_layernorm", "post_attention_layernorm", "self_attn.o_proj",
                 "mlp.down_proj"]
    per_layer += (["self_attn.qkv_proj", "mlp.gate_up_proj"] if fused else
                  ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj",
                   "mlp.up_proj"])
    if arch in ("qwen3", "qwen3moe", "gemma3"):
        per_layer += ["self_attn.q_norm", "self_attn.k_norm"]
    if arch == "gemma3":
        per_layer += ["pre_feedforward_layernorm", "post_feedforward_layernorm"]
    if config.get("num_experts"):  # every layer sparse: the experts replace the MLP
        per_layer = [n for n in per_layer if not n.startswith("mlp.")]
    names = ["model.embed_tokens.weight", "model.norm.weight"]
    for i in range(config["num_hidden_layers"]):
        names += [f"model.layers.{i}.{n}.weight" for n in per_layer]
        names += list(moe_shapes(config, i))
    return names


def check_tensors(path: Path, tensors: dict[str, GGUFTensor], config: dict[str, Any],
                  arch: str, fused: bool) -> None:
    """Every weight the forward pass reads is there, of the shape the config implies: nothing
    reaches the kernels otherwise (that each tensor is whole blocks inside the file,
    :func:`~agentrt.models.gguf_header.read_header` checked). ``fused``: the file keeps Q/K/V
    and gate/up rows in one tensor each (Phi-3)."""
    missing = [n for n in _required(config, arch, fused) if n not in tensors]
    if missing:
        raise ValueError(f"{path}: GGUF tensor for {missing[0]} is missing"
                         + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
    shapes = _expected_shapes(config)
    for name, t in tensors.items():
        want = shapes.get(name)
        if want is not None and t.shape != want:
            raise ValueError(f"{path}: tensor {t.name!r} ({name}) has shape {list(t.shape)}; "
                             f"the model's metadata needs {list(want)}")
        if not t.shape or min(t.shape) <= 0:  # whole blocks inside the file: read_header
            raise ValueError(f"{path}: tensor {t.name!r} has shape {list(t.shape)}")


def check_tokens(path: Path, reader, config: dict[str, Any]) -> None:
    """The vocabulary fits the embedding, and the special token ids name tokens."""
    field = reader.fields.get("tokenizer.ggml.tokens")
    if field is None:
        raise ValueError(f"{path}: GGUF file has no tokenizer (tokenizer.ggml.tokens); "
                         "agentrt reads the vocabulary from the file")
    num_tokens, vocab = len(field), config["vocab_size"]
    if not num_tokens or num_tokens > vocab:
        raise ValueError(f"{path}: the tokenizer has {num_tokens} tokens; the token embedding "
                         f"has rows for {vocab}")
    for key in ("token_type", "scores"):
        field = reader.fields.get(f"tokenizer.ggml.{key}")
        if field is not None and len(field) != num_tokens:
            raise ValueError(f"{path}: tokenizer.ggml.{key} has {len(field)} entries for "
                             f"{num_tokens} tokens")
    for key in ("bos", "eos", "eot", "eom"):
        field = reader.fields.get(f"tokenizer.ggml.{key}_token_id")
        token = field.contents() if field is not None else 0
        if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token < num_tokens:
            raise ValueError(f"{path}: tokenizer.ggml.{key}_token_id = {token!r} is not one of "
                             f"the tokenizer's {num_tokens} tokens")
