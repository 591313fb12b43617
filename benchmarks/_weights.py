"""Bytes of weights a decode step reads per token, for the benchmarks' bandwidth floor.

A dense model reads every linear layer and the output head. A mixture-of-experts layer reads
only its active parameters: the router, the ``top_k`` experts a token chose (and a shared
expert), never the unused ones: its floor is by active parameters, the total would be
meaningless (Qwen3-30B-A3B reads ~3B of its 30B parameters per token).
"""

from __future__ import annotations

__all__ = ["step_weight_bytes"]


def step_weight_bytes(model) -> int:
    """Bytes of weights one token's decode step reads from ``model`` (a LlamaModel)."""
    def nbytes(linear) -> int:
        if hasattr(linear, "parts"):  # ConcatLinear: parts in different formats
            return sum(map(nbytes, linear.parts))
        if hasattr(linear, "nbytes"):
            return linear.nbytes
        return linear.weight.numel() * linear.weight.element_size()

    dense = [x for layer in model.layers
             for x in (layer.qkv, layer.o_proj, layer.gate_up, layer.down) if x is not None]
    experts = sum(layer.moe.active_nbytes for layer in model.layers if layer.moe is not None)
    return sum(map(nbytes, dense)) + experts + nbytes(model.lm_head)
