"""Reference ops of the forward pass: RMSNorm, the residual add + RMSNorm, SwiGLU, RoPE.

Plain PyTorch, the arithmetic the model's reference implementations use. :class:`LlamaModel`
runs them by default; ``agentrt_kernels.cpu.decode_ops`` pairs each with a fused C++ twin and
falls back to these (and tests against them). Kept apart from ``llama.py`` so that the
kernels import only this leaf module, never the model.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["add_rms_norm", "apply_rope", "rms_norm", "silu_mul"]


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm computed in float32, as the reference implementations do."""
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def add_rms_norm(x: torch.Tensor, a: torch.Tensor, weight: torch.Tensor,
                 eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The residual add and the RMSNorm after it: ``(x + a, rms_norm(x + a))``."""
    x = x + a
    return x, rms_norm(x, weight, eps)


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """SwiGLU's ``silu(gate) * up`` of a fused (T, 2 * intermediate) gate/up output."""
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` (T, H, D) by per-token ``cos``/``sin`` (T, 1, D), half-split convention."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin
