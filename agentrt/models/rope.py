"""Rotary position embeddings, including the scaling variants of the Llama, Qwen and Phi-3
families.

``rope_tables`` precomputes cos/sin for every position once (the same float32 arithmetic as
Hugging Face, so outputs match it bit for bit); the forward pass indexes them by position.
The tables are static, so a variant that depends on the context length (``longrope``) is
chosen once, for the longest context the engine serves (``max_model_len``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

Tensor = torch.Tensor
Scaled = tuple[torch.Tensor, float]  # (scaled inverse frequencies, attention factor)

__all__ = ["ROPE_VARIANTS", "rope_tables"]


def _default(inv_freq: Tensor, p: dict[str, Any], max_pos: int, base: float,
             context_len: int) -> Scaled:
    return inv_freq, 1.0


def _linear(inv_freq: Tensor, p: dict[str, Any], max_pos: int, base: float,
            context_len: int) -> Scaled:
    return inv_freq / float(p["factor"]), 1.0


def _llama3(inv_freq: Tensor, p: dict[str, Any], max_pos: int, base: float,
            context_len: int) -> Scaled:
    factor = float(p["factor"])
    low, high = float(p.get("low_freq_factor", 1.0)), float(p.get("high_freq_factor", 4.0))
    old_len = float(p["original_max_position_embeddings"])
    low_wavelen, high_wavelen = old_len / low, old_len / high
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return torch.where(is_medium, smoothed, scaled), 1.0


def _yarn(inv_freq: Tensor, p: dict[str, Any], max_pos: int, base: float,
          context_len: int) -> Scaled:
    factor = float(p["factor"])
    dim = inv_freq.numel() * 2
    old_len = float(p.get("original_max_position_embeddings") or max_pos)
    beta_fast, beta_slow = float(p.get("beta_fast") or 32), float(p.get("beta_slow") or 1)

    def correction_dim(rotations: float) -> float:
        return (dim * math.log(old_len / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low = max(math.floor(correction_dim(beta_fast)), 0)
    high = min(math.ceil(correction_dim(beta_slow)), dim - 1)
    ramp = (torch.arange(dim // 2, dtype=torch.float32) - low) / max(high - low, 1e-3)
    extrapolation = 1 - ramp.clamp(0, 1)
    blended = inv_freq / factor * (1 - extrapolation) + inv_freq * extrapolation
    mscale = float(p.get("attention_factor") or (0.1 * math.log(factor) + 1.0 if factor > 1 else 1))
    return blended, mscale


def _longrope(inv_freq: Tensor, p: dict[str, Any], max_pos: int, base: float,
              context_len: int) -> Scaled:
    """Phi-3's LongRoPE: each frequency divided by its factor, the short factors for a context
    of at most ``original_max_position_embeddings`` tokens, the long ones beyond it.

    NOTE: transformers switches per sequence (long once a sequence outgrows the original
    context, recomputing its cache); these tables are static, so the choice is made once for
    the engine's context, as llama.cpp does for its ``n_ctx``: a sequence of a long-context
    engine runs on the long factors from its first token.
    """
    old_len = int(p["original_max_position_embeddings"])
    factors = p["long_factor"] if context_len > old_len else p["short_factor"]
    dim = inv_freq.numel() * 2
    exponents = torch.arange(0, dim, 2, dtype=torch.int64).to(torch.float32) / dim
    scaled = 1.0 / (torch.tensor(factors, dtype=torch.float32) * base**exponents)
    factor = float(p.get("factor") or max_pos / old_len)
    mscale = p.get("attention_factor")
    if mscale is None:
        mscale = math.sqrt(1 + math.log(factor) / math.log(old_len)) if factor > 1 else 1.0
    return scaled, float(mscale)


RopeVariant = Callable[[torch.Tensor, dict[str, Any], int, float, int], Scaled]
ROPE_VARIANTS: dict[str, RopeVariant] = {
    "default": _default,
    "linear": _linear,
    "llama3": _llama3,
    "yarn": _yarn,
    "longrope": _longrope,
}


def rope_tables(
    head_dim: int, theta: float, scaling: dict[str, Any] | None, max_pos: int,
    context_len: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin tables of shape (context_len, head_dim), float32. ``context_len`` is the
    longest sequence the engine runs (its ``max_model_len``; ``max_pos`` when not given): the
    tables cover its positions, and the variants that depend on it (``longrope``) pick their
    frequencies by it."""
    kind = (scaling or {}).get("rope_type", "default")
    if kind not in ROPE_VARIANTS:
        raise NotImplementedError(
            f"RoPE scaling {kind!r} is not supported (supported: {', '.join(ROPE_VARIANTS)})"
        )
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).to(torch.float32) / head_dim
    inv_freq = 1.0 / (theta**exponents)
    inv_freq, mscale = ROPE_VARIANTS[kind](inv_freq, scaling or {}, max_pos, theta,
                                           context_len or max_pos)
    positions = torch.arange(context_len or max_pos, dtype=torch.float32)
    freqs = positions[:, None] * inv_freq[None, :]  # (P, D/2)
    emb = torch.cat((freqs, freqs), dim=-1)  # (P, D)
    return emb.cos() * mscale, emb.sin() * mscale

