"""Small GGUF model files for the tests: a random transformers model written the way llama.cpp's
converter writes it (gguf's tensor names, Q/K rows interleaved for llama, Phi-3's fused rows and
longrope factor vectors as they are, a ``llama3`` RoPE scaling as its ``rope_freqs`` vector,
``linear`` and ``yarn`` as ``rope.scaling.*`` metadata), in any block format.

Formats the installed ``gguf`` package can quantize (Q4_0/Q4_1/Q5_x/Q8_0, F16, BF16) are
quantized from the model's weights; k-quants (Q4_K, Q5_K, Q6_K), which it only dequantizes, are
random blocks with finite scales chosen for weights of about the model's size. With ``sync`` the
model is given the values the file holds (``gguf.quants.dequantize`` of the written bytes), so
transformers then runs exactly the weights agentrt reads.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agentrt.models.files import default_gguf

SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=512, vocab_size=49152)
"""A two-layer config with the default model's vocabulary."""
KQUANT_SIZED = dict(SMALL, hidden_size=256, intermediate_size=512, vocab_size=512)
"""Rows of 256 (k-quant blocks), a 512-token vocabulary (:func:`tiny_tokenizer`)."""
CASES = {  # name: (config class, model class, GGUF architecture, general.name, extra config)
    "llama": ("LlamaConfig", "LlamaForCausalLM", "llama", "tiny llama",
              dict(tie_word_embeddings=False)),
    "mistral": ("MistralConfig", "MistralForCausalLM", "llama", "Tiny Mistral",
                dict(tie_word_embeddings=False, sliding_window=None)),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", "qwen2", "tiny qwen2",
              dict(tie_word_embeddings=True)),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", "qwen3", "tiny qwen3",
              dict(head_dim=32, tie_word_embeddings=False)),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", "phi3", "tiny phi3",
             dict(tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=None)),
}
IDS = list(range(100, 400, 3))  # 100 tokens: prefill then greedy decode


def build(case: str, **config):
    """A random transformers model of ``case`` (seed 0): ``(model, GGUF arch, general.name)``."""
    import transformers

    config_cls, model_cls, arch, name, extra = CASES[case]
    torch.manual_seed(0)
    cfg = getattr(transformers, config_cls)(**{**SMALL, **extra, **config})
    return getattr(transformers, model_cls)(cfg).eval(), arch, name


@functools.cache
def _default_tokenizer_fields() -> dict[str, Any]:
    """The default model's tokenizer metadata, read once (gguf's reader takes seconds)."""
    import gguf

    fields = gguf.GGUFReader(str(default_gguf())).fields
    return {k: f.contents() for k, f in fields.items() if k.startswith("tokenizer.")}


def default_tokenizer(writer, gguf) -> None:
    """Copy the default model's tokenizer (GPT-2 BPE, 49152 tokens) into ``writer``."""
    value = _default_tokenizer_fields().__getitem__

    writer.add_tokenizer_model(value("tokenizer.ggml.model"))
    writer.add_tokenizer_pre(value("tokenizer.ggml.pre"))
    writer.add_token_list(value("tokenizer.ggml.tokens"))
    writer.add_token_types(value("tokenizer.ggml.token_type"))
    writer.add_token_merges(value("tokenizer.ggml.merges"))
    writer.add_bos_token_id(value("tokenizer.ggml.bos_token_id"))
    writer.add_eos_token_id(value("tokenizer.ggml.eos_token_id"))
    writer.add_chat_template(value("tokenizer.chat_template"))


def tiny_tokenizer(writer, gguf) -> None:
    """A 512-token byte-level BPE (256 bytes, one merge, Phi-3's ``<|end|>`` = 257, fillers,
    eos = 511): converts fast."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    tokens = [*bytes_to_unicode().values(), "Ġt", "<|end|>", *(f"<extra_{i}>" for i in range(253)),
              "<|endoftext|>"]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([1] * 257 + [4] * 254 + [3])
    writer.add_token_merges(["Ġ t"])
    writer.add_bos_token_id(511)
    writer.add_eos_token_id(511)


def _permute(w, n_head: int):
    """llama.cpp's interleaving of the rotary halves of Q/K rows."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(
        w.shape)


# random block layouts: (values, bytes, [(offset, f16 scale)...]) -- the rest random bytes
_RANDOM_BLOCKS = {"Q4_K": (256, 144, [(0, 2e-4), (2, 1.5e-3)]),
                  "Q5_K": (256, 176, [(0, 1e-4), (2, 1.5e-3)]),
                  "Q6_K": (256, 210, [(208, 2e-5)]),
                  "Q8_0": (32, 34, [(0, 1e-3)])}
_QUANTIZE_FROM_VALUES = {"F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"}


def random_blocks(rows: int, cols: int, qtype, rng: np.random.Generator) -> np.ndarray:
    """Random ``qtype`` blocks ``(rows, bytes_per_row)``: for k-quants and Q8_0 valid ones
    (values of about +-0.1, every scale a finite float16), for other types random bytes."""
    import gguf

    values, size = gguf.GGML_QUANT_SIZES[qtype]
    _, _, scales = _RANDOM_BLOCKS.get(qtype.name, (values, size, []))
    n = cols // values
    blocks = rng.integers(0, 256, size=(rows, n, size), dtype=np.uint8)
    for offset, scale in scales:
        d = (scale * rng.uniform(0.5, 1.5, size=(rows, n))).astype(np.float16)
        blocks[:, :, offset:offset + 2] = d.view(np.uint8).reshape(rows, n, 2)
    return blocks.reshape(rows, -1)


def encode(data: np.ndarray, qtype, rng: np.random.Generator) -> np.ndarray:
    """``data`` (out, in) in ``qtype``: quantized where gguf can, random k-quant blocks else."""
    import gguf

    if qtype.name in _QUANTIZE_FROM_VALUES:
        return gguf.quants.quantize(data, qtype)
    return random_blocks(*data.shape, qtype, rng)


Formats = Callable[[str], object]
"""GGUF tensor name -> its GGMLQuantizationType (2-D weights only), or None for F32."""


def write_gguf(hf, path: Path, arch: str, name: str, qtype=None, *, sync: bool = False,
               tokenizer=default_tokenizer) -> Path:
    """``hf`` as a GGUF file: F32, or ``qtype`` (a type, or a :data:`Formats` function) for 2-D
    weights; norms and biases stay F32. With ``sync`` the model takes the file's values."""
    import gguf

    cfg = hf.config
    writer = gguf.GGUFWriter(str(path), arch)
    write_header(writer, name, cfg)
    tokenizer(writer, gguf)
    name_map = gguf.get_tensor_name_map(gguf.MODEL_ARCH[arch.upper()], cfg.num_hidden_layers)
    if arch == "phi3":
        write_phi3_rope(writer, cfg)
    if arch == "llama":
        write_llama3_rope(writer, cfg)
    write_rope_scaling(writer, cfg)
    rng = np.random.default_rng(0)
    params = dict(hf.named_parameters())
    for hf_name, tensor in hf.state_dict().items():
        if hf_name == "lm_head.weight" and cfg.tie_word_embeddings:
            continue
        base, suffix = hf_name.rsplit(".", 1)
        gguf_name = f"{name_map.get_name(base)}.{suffix}"
        data = tensor.detach().float().numpy()
        kind = (qtype(gguf_name) if callable(qtype) else qtype) if data.ndim == 2 else None
        if kind is not None:
            data = encode(data, kind, rng)
            if sync:
                values = gguf.quants.dequantize(data, kind).reshape(tensor.shape)
                with torch.no_grad():
                    params[hf_name].copy_(torch.from_numpy(values))
        n_head = {"q_proj": cfg.num_attention_heads, "k_proj": cfg.num_key_value_heads}.get(
            base.rsplit(".", 1)[-1])
        if arch == "llama" and n_head:
            data = _permute(data, n_head)
        writer.add_tensor(gguf_name, data, raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def write_header(writer, name: str, cfg) -> None:
    """The model metadata llama.cpp's converter writes, from a transformers-style ``cfg``."""
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    writer.add_name(name)
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_block_count(cfg.num_hidden_layers)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(cfg.num_attention_heads)
    writer.add_head_count_kv(cfg.num_key_value_heads)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    rope = getattr(cfg, "rope_parameters", None)
    writer.add_rope_freq_base(float(rope["rope_theta"]) if rope else cfg.rope_theta)
    writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    writer.add_vocab_size(cfg.vocab_size)


def write_phi3_rope(writer, cfg) -> None:
    """What llama.cpp's converter adds for Phi-3: the sliding window (0 = none), the original
    context, and for ``longrope`` its attention factor and factor vectors as tensors."""
    rope = cfg.rope_parameters
    old_len = rope.get("original_max_position_embeddings", cfg.max_position_embeddings)
    writer.add_rope_scaling_orig_ctx_len(old_len)
    writer.add_sliding_window(cfg.sliding_window or 0)
    if rope["rope_type"] != "longrope":
        return
    scale = cfg.max_position_embeddings / old_len
    writer.add_rope_scaling_attn_factors(
        math.sqrt(1 + math.log(scale) / math.log(old_len)) if scale > 1 else 1.0)
    for kind in ("long", "short"):
        writer.add_tensor(f"rope_factors_{kind}.weight",
                          np.array(rope[f"{kind}_factor"], dtype=np.float32))


def write_llama3_rope(writer, cfg) -> None:
    """What llama.cpp's converter adds for a ``llama3`` RoPE scaling: ``rope_freqs``, one
    float32 factor per frequency that llama.cpp divides it by (1 for wavelengths under
    ``original / high_freq_factor``, ``factor`` over ``original / low_freq_factor``, between
    them the inverse of the blend transformers interpolates)."""
    rope = getattr(cfg, "rope_parameters", None) or {}
    if rope.get("rope_type") != "llama3":
        return
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    exponents = torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim
    wavelen = 2 * math.pi / (1.0 / float(rope["rope_theta"]) ** exponents)  # as HF's inv_freq
    factor, old_len = float(rope["factor"]), float(rope["original_max_position_embeddings"])
    low, high = float(rope["low_freq_factor"]), float(rope["high_freq_factor"])
    smooth = (old_len / wavelen - low) / (high - low)
    blend = 1 / ((1 - smooth) / factor + smooth)
    factors = torch.where(wavelen < old_len / high, torch.ones_like(wavelen),
                          torch.where(wavelen > old_len / low, torch.full_like(wavelen, factor),
                                      blend))
    writer.add_tensor("rope_freqs.weight", factors.numpy().astype(np.float32))


def write_rope_scaling(writer, cfg) -> None:
    """What llama.cpp's converter writes for a ``linear`` or ``yarn`` RoPE scaling: its type
    and factor, and for YaRN the original context and whichever of beta_fast, beta_slow and
    attention_factor the config sets."""
    rope = getattr(cfg, "rope_parameters", None) or {}
    kind = rope.get("rope_type")
    if kind not in ("linear", "yarn"):
        return
    import gguf

    writer.add_rope_scaling_type(gguf.RopeScalingType(kind))
    writer.add_rope_scaling_factor(float(rope["factor"]))
    if kind == "yarn":
        writer.add_rope_scaling_orig_ctx_len(rope["original_max_position_embeddings"])
        for key, add in (("beta_fast", writer.add_rope_scaling_yarn_beta_fast),
                         ("beta_slow", writer.add_rope_scaling_yarn_beta_slow),
                         ("attention_factor", writer.add_rope_scaling_yarn_attn_factor)):
            if rope.get(key) is not None:
                add(float(rope[key]))


def write_random_llama(path: Path, cfg, formats: Formats) -> Path:
    """A llama GGUF of random blocks straight from ``cfg`` (no transformers model in memory):
    for files too large to build the model first. Norms are ones."""
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    write_header(writer, "random llama", cfg)
    tiny_tokenizer(writer, gguf)
    rng = np.random.default_rng(0)
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    q, kv = cfg.num_attention_heads * head_dim, cfg.num_key_value_heads * head_dim
    h, f = cfg.hidden_size, cfg.intermediate_size
    shapes = {"token_embd": (cfg.vocab_size, h), "output_norm": (h,)}
    for i in range(cfg.num_hidden_layers):
        shapes.update({f"blk.{i}.{n}": s for n, s in (
            ("attn_norm", (h,)), ("ffn_norm", (h,)), ("attn_q", (q, h)), ("attn_k", (kv, h)),
            ("attn_v", (kv, h)), ("attn_output", (h, q)), ("ffn_gate", (f, h)),
            ("ffn_up", (f, h)), ("ffn_down", (h, f)))})
    for base, shape in shapes.items():
        name = base + ".weight"
        if len(shape) == 1:
            writer.add_tensor(name, np.ones(shape, dtype=np.float32))
        else:
            kind = formats(name)
            writer.add_tensor(name, random_blocks(*shape, kind, rng), raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def reference(hf, ids: list[int] = IDS, steps: int = 6):
    """transformers' greedy tokens after ``ids`` and the log-softmax of every step's logits."""
    with torch.inference_mode():
        tokens = hf.generate(torch.tensor([ids]), max_new_tokens=steps, min_new_tokens=steps,
                             do_sample=False)[0, len(ids):].tolist()
        logits = hf(torch.tensor([ids + tokens[:-1]])).logits[0, len(ids) - 1:].log_softmax(-1)
    return tokens, logits
