"""What a mixture-of-experts GGUF file (``qwen3moe``, ``qwen2moe``) adds to a dense one.

The metadata's expert keys become the Hugging Face config's (``num_experts``,
``num_experts_per_tok``, ``moe_intermediate_size``, ``norm_topk_prob``; Qwen2-MoE's
``shared_expert_intermediate_size``): llama.cpp's converter writes every layer sparse and
llama.cpp renormalises the k weights for ``qwen3moe`` and not for ``qwen2moe``, unless the file
says (``expert_weights_norm``). The tensors are the router ``ffn_gate_inp`` and the experts
stacked in ``ffn_{gate,up,down}_exps`` (experts, out, in), named as the ``gguf`` package's name
map names them (``mlp.gate``, ``mlp.experts.gate_proj`` ...); their shapes are checked against
the metadata before anything reads them (:func:`moe_shapes`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["MOE_ARCHITECTURES", "check_moe_config", "moe_config", "moe_shapes",
           "moe_tensor_names"]

#: GGUF architecture -> (transformers' GGUF_CONFIG_MAPPING section and model_type, renormalise)
MOE_ARCHITECTURES: dict[str, tuple[str, bool]] = {
    "qwen2moe": ("qwen2_moe", False),
    "qwen3moe": ("qwen3_moe", True),
}
_MAX_EXPERTS = 1 << 12


def moe_config(meta: dict, arch: str, config: dict[str, Any]) -> None:
    """Add the expert keys of a ``arch`` file's metadata ``meta`` to ``config`` (in place)."""
    model_type, norm = MOE_ARCHITECTURES[arch]
    config["model_type"] = model_type
    config["moe_intermediate_size"] = int(meta[f"{arch}.expert_feed_forward_length"])
    config.setdefault("intermediate_size", config["moe_intermediate_size"])
    config["norm_topk_prob"] = bool(meta.get(f"{arch}.expert_weights_norm", norm))
    config["decoder_sparse_step"], config["mlp_only_layers"] = 1, []
    shared = meta.get(f"{arch}.expert_shared_feed_forward_length")
    if shared:
        config["shared_expert_intermediate_size"] = int(shared)


def check_moe_config(path: Path, config: dict[str, Any]) -> None:
    """The expert counts and sizes are positive, bounded and consistent."""
    experts, used = config.get("num_experts"), config.get("num_experts_per_tok")
    for key, value, most in (("num_experts", experts, _MAX_EXPERTS),
                             ("num_experts_per_tok", used, experts),
                             ("moe_intermediate_size", config["moe_intermediate_size"], 1 << 20)):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= (most or 0):
            raise ValueError(f"{path}: invalid GGUF model metadata: {key} = {value!r} "
                             f"(expected an integer from 1 to {most})")


def moe_tensor_names(arch: str) -> tuple[str, ...]:
    """The Hugging Face names (under ``model.layers.{i}.``) of ``arch``'s expert tensors."""
    if arch not in MOE_ARCHITECTURES:
        return ()
    names = ("mlp.gate", "mlp.experts.gate_proj", "mlp.experts.up_proj", "mlp.experts.down_proj")
    if arch == "qwen2moe":
        names += ("mlp.shared_expert.gate_proj", "mlp.shared_expert.up_proj",
                  "mlp.shared_expert.down_proj", "mlp.shared_expert_gate")
    return names


def moe_shapes(config: dict[str, Any], layer: int) -> dict[str, tuple[int, ...]]:
    """The shape the forward pass needs of each expert tensor of ``layer`` (HF names), and
    which of them it needs (all): empty for a dense model."""
    if not config.get("num_experts"):
        return {}
    e, h, f = config["num_experts"], config["hidden_size"], config["moe_intermediate_size"]
    p = f"model.layers.{layer}.mlp."
    shapes = {p + "gate.weight": (e, h), p + "experts.gate_proj.weight": (e, f, h),
              p + "experts.up_proj.weight": (e, f, h), p + "experts.down_proj.weight": (e, h, f)}
    s = config.get("shared_expert_intermediate_size")
    if s:
        shapes.update({p + "shared_expert.gate_proj.weight": (s, h),
                       p + "shared_expert.up_proj.weight": (s, h),
                       p + "shared_expert.down_proj.weight": (h, s)})
    return shapes
