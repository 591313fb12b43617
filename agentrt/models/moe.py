"""Mixture-of-experts MLP layers (Qwen3-MoE, Qwen2-MoE): a router and stacked experts.

A sparse layer's MLP is a router (``mlp.gate``: one row of logits weights per expert) that
picks each token's top-k experts, and the experts, SwiGLU MLPs of ``moe_intermediate_size``;
their outputs are summed by the router's weights
(:mod:`agentrt_kernels.cpu.moe`: each used expert runs once per step on its tokens). Qwen2-MoE
adds a shared expert every token runs, scaled by ``sigmoid(shared_expert_gate(h))``.

Weights: each expert is a linear layer of its own (gate and up rows fused) that the weight
source builds (:meth:`~agentrt.models.weights.Weights.experts`): from a GGUF file, a view of
one expert's slice of the stacked ``ffn_*_exps`` tensor in the file's own blocks; from a
Hugging Face folder, its ``experts.{e}.*_proj`` weights. :class:`MoEConfig` says which layers
are sparse (``mlp_only_layers``, ``decoder_sparse_step``) and how the router weighs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from agentrt.models.linear import Linear
from agentrt.models.weights import Weights

__all__ = ["MoEBlock", "MoEConfig", "build_moe"]


@dataclass(frozen=True)
class MoEConfig:
    """The mixture-of-experts part of a model's config."""

    num_experts: int
    top_k: int
    """Experts each token runs (``num_experts_per_tok``)."""
    intermediate_size: int
    """Each expert's (``moe_intermediate_size``)."""
    norm_topk_prob: bool
    """Renormalise the k chosen probabilities to sum to 1."""
    sparse_layers: tuple[int, ...]
    """The layers whose MLP is the experts; the others are dense (``intermediate_size``)."""
    shared_intermediate_size: int = 0
    """The shared expert's (Qwen2-MoE); 0: none."""

    def __post_init__(self) -> None:
        if not 0 < self.top_k <= self.num_experts:
            raise ValueError(f"num_experts_per_tok = {self.top_k} must be 1..num_experts "
                             f"({self.num_experts})")
        if self.intermediate_size <= 0:
            raise ValueError(f"moe_intermediate_size = {self.intermediate_size} must be > 0")

    @classmethod
    def from_hf(cls, hf, num_layers: int) -> MoEConfig | None:
        """From a transformers config; None where it has no experts."""
        num_experts = int(getattr(hf, "num_experts", 0) or 0)
        if not num_experts:
            return None
        dense = set(getattr(hf, "mlp_only_layers", None) or ())
        step = int(getattr(hf, "decoder_sparse_step", 1) or 1)
        return cls(
            num_experts=num_experts, top_k=int(hf.num_experts_per_tok),
            intermediate_size=int(hf.moe_intermediate_size),
            norm_topk_prob=bool(getattr(hf, "norm_topk_prob", False)),
            sparse_layers=tuple(i for i in range(num_layers)
                                if i not in dense and (i + 1) % step == 0),
            shared_intermediate_size=int(getattr(hf, "shared_expert_intermediate_size", 0) or 0))


class MoEBlock:
    """A sparse MLP: ``h`` (T, hidden) -> the router-weighted sum of its experts' outputs."""

    def __init__(self, config: MoEConfig, router: torch.Tensor, gate_up: list[Linear],
                 down: list[Linear], act: Callable[[torch.Tensor], torch.Tensor],
                 shared: tuple[Linear, Linear, torch.Tensor] | None = None) -> None:
        self.config, self.router, self.gate_up, self.down = config, router, gate_up, down
        self.act = act
        self.shared = shared
        """The shared expert's gate/up and down, and its gate's (1, hidden) row; or None."""

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        from agentrt_kernels.cpu.moe import experts_forward, route

        c = self.config
        routing = route(F.linear(h, self.router), c.top_k, c.norm_topk_prob)
        out = experts_forward(h, routing, self.gate_up, self.down, self.act)
        if self.shared is not None:
            gate_up, down, gate = self.shared
            out = out + torch.sigmoid(F.linear(h, gate)) * down(self.act(gate_up(h)))
        return out

    @property
    def expert_nbytes(self) -> int:
        """Bytes of one expert's weights (each expert is stored alike)."""
        return _nbytes(self.gate_up[0]) + _nbytes(self.down[0])

    @property
    def active_nbytes(self) -> int:
        """Bytes one token reads: the router, k experts and the shared expert."""
        shared = 0 if self.shared is None else sum(_nbytes(x) for x in self.shared)
        return _nbytes(self.router) + self.config.top_k * self.expert_nbytes + shared

    @property
    def nbytes(self) -> int:
        """Bytes of all the layer's weights (every expert)."""
        shared = 0 if self.shared is None else sum(_nbytes(x) for x in self.shared)
        return _nbytes(self.router) + self.config.num_experts * self.expert_nbytes + shared


def build_moe(w: Weights, prefix: str, config: MoEConfig,
              act: Callable[[torch.Tensor], torch.Tensor]) -> MoEBlock:
    """The sparse MLP whose weights are under ``prefix`` (``model.layers.{i}.mlp.``)."""
    experts = prefix + "experts."
    shared = None
    if config.shared_intermediate_size:
        s = prefix + "shared_expert."
        shared = (w.linear([s + "gate_proj.weight", s + "up_proj.weight"]),
                  w.linear([s + "down_proj.weight"]),
                  w.tensor(prefix + "shared_expert_gate.weight").reshape(1, -1))
    return MoEBlock(
        config, w.tensor(prefix + "gate.weight"),
        w.experts(experts, ["gate_proj", "up_proj"], config.num_experts),
        w.experts(experts, ["down_proj"], config.num_experts), act, shared)


def _nbytes(part) -> int:
    """Bytes of a linear layer or tensor's weights."""
    if isinstance(part, torch.Tensor):
        return part.numel() * part.element_size()
    if hasattr(part, "parts"):  # ConcatLinear
        return sum(map(_nbytes, part.parts))
    if hasattr(part, "nbytes"):
        return int(part.nbytes)
    return part.weight.numel() * part.weight.element_size()
