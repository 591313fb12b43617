"""Small mixture-of-experts models for the tests: random transformers Qwen3-MoE / Qwen2-MoE
models, as GGUF files written the way llama.cpp's converter writes them (the router
``ffn_gate_inp`` in F32, the experts stacked in ``ffn_{gate,up,down}_exps``, the expert keys in
the metadata), in any block format; with ``sync`` transformers gets the values the file holds.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from gguf_models import SMALL, encode, tiny_tokenizer, write_header

MOE = dict(SMALL, moe_intermediate_size=32, num_experts=8, num_experts_per_tok=2,
           tie_word_embeddings=False)
"""8 experts, top-2, hidden 64, 2 layers."""
KQUANT_MOE = dict(MOE, hidden_size=256, intermediate_size=256, moe_intermediate_size=256,
                  head_dim=64, vocab_size=512)
"""Rows of 256 everywhere (k-quant blocks), the tiny tokenizer's 512 tokens."""
CASES = {  # name: (config class, model class, GGUF architecture, extra config)
    "qwen3moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", "qwen3moe",
                 dict(head_dim=16, norm_topk_prob=True)),  # llama.cpp renormalises qwen3moe
    "qwen2moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM", "qwen2moe",
                 dict(norm_topk_prob=False, shared_expert_intermediate_size=64, qkv_bias=True)),
}


def build_moe(case: str = "qwen3moe", **config):
    """A random transformers model of ``case`` (seed 0)."""
    import transformers

    config_cls, model_cls, _, extra = CASES[case]
    torch.manual_seed(0)
    cfg = getattr(transformers, config_cls)(**{**MOE, **extra, **config})
    return getattr(transformers, model_cls)(cfg).eval()


def _stacked(hf) -> dict[str, torch.Tensor]:
    """The model's tensors with the experts as llama.cpp stacks them: gate and up apart."""
    out = {}
    for name, t in hf.state_dict().items():
        if name.endswith("experts.gate_up_proj"):
            gate, up = t.chunk(2, dim=1)
            out[name.replace("gate_up_proj", "gate_proj.weight")] = gate
            out[name.replace("gate_up_proj", "up_proj.weight")] = up
        elif name.endswith("experts.down_proj"):
            out[name + ".weight"] = t
        else:
            out[name] = t
    return out


def write_moe_gguf(hf, path: Path, case: str = "qwen3moe", qtype=None, *, sync: bool = False,
                   tokenizer=tiny_tokenizer) -> Path:
    """``hf`` as a GGUF file: F32, or ``qtype`` for the attention, expert and output weights
    (the router and the shared expert's gate stay F32, as llama.cpp keeps them)."""
    import gguf

    arch, cfg = CASES[case][2], hf.config
    writer = gguf.GGUFWriter(str(path), arch)
    write_header(writer, f"tiny {case}", cfg)
    writer.add_expert_count(cfg.num_experts)
    writer.add_expert_used_count(cfg.num_experts_per_tok)
    writer.add_expert_feed_forward_length(cfg.moe_intermediate_size)
    if case == "qwen2moe":
        writer.add_expert_shared_feed_forward_length(cfg.shared_expert_intermediate_size)
    tokenizer(writer, gguf)
    name_map = gguf.get_tensor_name_map(gguf.MODEL_ARCH[arch.upper()], cfg.num_hidden_layers)
    rng = np.random.default_rng(0)
    values = {}
    for hf_name, tensor in _stacked(hf).items():
        base, suffix = hf_name.rsplit(".", 1)
        gguf_name = f"{name_map.get_name(base)}.{suffix}"
        data = tensor.detach().float().numpy()
        keep = data.ndim == 1 or "gate_inp" in gguf_name
        kind = None if qtype is None or keep else qtype
        if kind is not None:
            rows = encode(data.reshape(-1, data.shape[-1]), kind, rng)
            data = rows.reshape(*data.shape[:-1], rows.shape[-1])
            values[hf_name] = gguf.quants.dequantize(rows, kind).reshape(tensor.shape)
        writer.add_tensor(gguf_name, data, raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    if sync:
        _load_values(hf, values)
    return path


def _load_values(hf, values: dict[str, np.ndarray]) -> None:
    """Give ``hf`` the file's values (stacked names back to transformers' fused ones)."""
    params = dict(hf.named_parameters())
    with torch.no_grad():
        for name, v in values.items():
            v = torch.from_numpy(v)
            if ".experts.gate_proj" in name or ".experts.up_proj" in name:
                fused = params[name.rsplit(".", 2)[0] + ".gate_up_proj"]
                half = fused.shape[1] // 2
                part = slice(0, half) if ".gate_proj" in name else slice(half, None)
                fused[:, part].copy_(v)
            elif ".experts.down_proj" in name:
                params[name.removesuffix(".weight")].copy_(v)
            else:
                params[name].copy_(v)
