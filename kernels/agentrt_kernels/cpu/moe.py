"""Mixture-of-experts dispatch: route each token to its top-k experts, run each used expert once.

:func:`route` is the router's arithmetic as transformers' Qwen2/Qwen3-MoE routers do it
(softmax in float32 over the experts, ``torch.topk`` and so its tie order, the k weights
renormalised on request). :func:`experts_forward` groups the step's tokens by expert and calls
each used expert's two linear layers once on its rows: at batch 1 that reads only the k
selected experts' weights; in a batch each used expert's weights are read once per step, and
an expert no token chose is not read at all. The linears are whatever the model's weights
give: a :class:`~agentrt_kernels.cpu.gguf_linear.GGUFLinear` on one expert's slice of a GGUF
file's stacked tensor (its float32 or int8 activation path), or float weights.
:func:`ref_experts_forward` is the torch twin, transformers' loop over a one-hot expert mask on
stacked float weights.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple, Protocol

import torch
import torch.nn.functional as F

from agentrt.models.ops import silu_mul

__all__ = ["Routing", "experts_forward", "ref_experts_forward", "route"]


class _Linear(Protocol):
    def __call__(self, h: torch.Tensor) -> torch.Tensor: ...


class Routing(NamedTuple):
    """Each token's experts and their weights."""

    weights: torch.Tensor
    """(T, k) float32: the weight of each chosen expert's output."""
    ids: torch.Tensor
    """(T, k) int64: the chosen experts, most probable first (``torch.topk``'s order)."""


def route(logits: torch.Tensor, top_k: int, normalize: bool) -> Routing:
    """The top ``top_k`` experts of each row of router ``logits`` (T, num_experts): softmax in
    float32, ``torch.topk`` (so ties resolve as transformers' routers resolve them), and with
    ``normalize`` (``norm_topk_prob``) the k probabilities divided by their sum."""
    probs = torch.softmax(logits, dim=-1, dtype=torch.float32)
    weights, ids = torch.topk(probs, top_k, dim=-1)
    if normalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return Routing(weights, ids)


def experts_forward(h: torch.Tensor, routing: Routing, gate_up: Sequence[_Linear],
                    down: Sequence[_Linear],
                    act: Callable[[torch.Tensor], torch.Tensor] = silu_mul) -> torch.Tensor:
    """``sum_j weights[t, j] * down[e](act(gate_up[e](h[t])))`` over each token's experts
    ``e = ids[t, j]``: the rows of ``h`` (T, hidden) grouped by expert, each used expert's
    linears called once on its rows (``gate_up[e]``: fused (2 * intermediate) rows; ``act``:
    SwiGLU on them). Experts are summed in increasing index, as :func:`ref_experts_forward`."""
    weights, ids = routing
    out = torch.zeros_like(h)
    if h.shape[0] == 1:  # decode at batch 1: k experts, no grouping to do
        order = torch.argsort(ids[0]).tolist()
        ids_row, w_row = ids[0].tolist(), weights[0].to(h.dtype)
        for j in order:
            e = ids_row[j]
            out += down[e](act(gate_up[e](h))) * w_row[j]
        return out
    flat = ids.flatten()
    order = torch.argsort(flat, stable=True)  # (T * k,) grouped by expert, tokens in order
    counts = torch.bincount(flat, minlength=len(gate_up)).tolist()
    w_flat = weights.flatten().to(h.dtype)
    start = 0
    for e, n in enumerate(counts):
        if not n:
            continue  # chosen by no token: never read
        picks = order[start:start + n]
        start += n
        rows = picks // ids.shape[1]
        y = down[e](act(gate_up[e](h[rows])))
        out.index_add_(0, rows, y * w_flat[picks].unsqueeze(1))
    return out


def ref_experts_forward(h: torch.Tensor, routing: Routing, gate_up: torch.Tensor,
                        down: torch.Tensor) -> torch.Tensor:
    """:func:`experts_forward` as transformers computes it, on stacked float weights
    ``gate_up`` (E, 2 * intermediate, hidden) and ``down`` (E, hidden, intermediate)."""
    weights, ids = routing
    out = torch.zeros_like(h)
    mask = F.one_hot(ids, num_classes=gate_up.shape[0]).permute(2, 1, 0)  # (E, k, T)
    for e in torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()[:, 0].tolist():
        pos, tokens = torch.where(mask[e])
        gate, up = F.linear(h[tokens], gate_up[e]).chunk(2, dim=-1)
        y = F.linear(F.silu(gate) * up, down[e]) * weights[tokens, pos, None].to(h.dtype)
        out.index_add_(0, tokens, y)
    return out
