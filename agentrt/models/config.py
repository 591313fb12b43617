"""ModelConfig: the few numbers the Llama-family forward pass needs, read from config.json.

transformers parses the file (``AutoConfig``); this module keeps only what agentrt's own
forward pass uses and rejects architectures it does not implement with a clear error.

Each layer has an attention type (:attr:`ModelConfig.layer_windows`): global, or sliding
with a window of W tokens (the query at p sees keys p - W + 1 .. p, as transformers'
``sliding_window``): every layer of a Mistral 7B v0.1 (4096) or Phi-3-mini-4k (2047) whose
config.json sets a window, the layers ``layer_types`` marks ``sliding_attention`` (Gemma 3:
five of every six).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrt.models.moe import MoEConfig

__all__ = ["SUPPORTED_ARCHITECTURES", "ModelConfig", "UnsupportedModelError"]

# architecture name in config.json -> (qkv bias, per-head q/k RMSNorm)
SUPPORTED_ARCHITECTURES: dict[str, tuple[bool, bool]] = {
    "LlamaForCausalLM": (False, False),
    "MistralForCausalLM": (False, False),
    "Qwen2ForCausalLM": (True, False),
    "Qwen3ForCausalLM": (False, True),
    "Phi3ForCausalLM": (False, False),  # Q/K/V and gate/up stored fused: qkv_proj, gate_up_proj
    "Gemma3ForCausalLM": (False, True),  # agentrt.models.gemma3
    "Qwen2MoeForCausalLM": (True, False),  # mixture of experts: agentrt.models.moe
    "Qwen3MoeForCausalLM": (False, True),
}
_ALWAYS_WINDOWED = frozenset({"Gemma3ForCausalLM"})  # the window is the architecture's own


class UnsupportedModelError(ValueError):
    """The model folder holds an architecture agentrt's forward pass does not implement."""


@dataclass(frozen=True)
class ModelConfig:
    """Shape and numerics of a Llama-family decoder."""

    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: dict[str, Any] | None
    max_position_embeddings: int
    tie_word_embeddings: bool
    qkv_bias: bool
    qk_norm: bool
    eos_token_ids: tuple[int, ...]
    layer_windows: tuple[int | None, ...] = ()
    """Each layer's sliding window in tokens, None for a global layer; () = all global."""
    rope_local_theta: float | None = None
    """The RoPE base of sliding layers where it differs from ``rope_theta`` (Gemma 3)."""
    query_pre_attn_scalar: float | None = None
    """Attention scores are scaled by this ** -0.5 (Gemma); None = ``head_dim ** -0.5``."""
    moe: MoEConfig | None = None
    """The experts of a mixture-of-experts model (:mod:`agentrt.models.moe`); None: dense."""

    def __post_init__(self) -> None:
        if self.num_heads % self.num_kv_heads:
            raise ValueError("num_heads must be a multiple of num_kv_heads")
        if self.layer_windows and len(self.layer_windows) != self.num_layers:
            raise ValueError(f"layer_windows: {len(self.layer_windows)} entries for "
                             f"{self.num_layers} layers")

    @property
    def attn_scale(self) -> float:
        """The softmax scale of attention scores."""
        return (self.query_pre_attn_scalar or self.head_dim) ** -0.5

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of K and V per token over all layers, at 4 bytes per element (scale for dtype)."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * 4

    @classmethod
    def from_folder(cls, folder: Path) -> ModelConfig:
        """Read ``folder/config.json`` through transformers' ``AutoConfig``."""
        from transformers import AutoConfig

        hf = AutoConfig.from_pretrained(str(folder))
        arch = (getattr(hf, "architectures", None) or ["?"])[0]
        if arch not in SUPPORTED_ARCHITECTURES:
            raise UnsupportedModelError(
                f"{folder}: architecture {arch!r} is not supported; agentrt implements "
                f"{', '.join(sorted(SUPPORTED_ARCHITECTURES))}"
            )
        qkv_bias, qk_norm = SUPPORTED_ARCHITECTURES[arch]
        rotary = float(_rope_params(hf).get("partial_rotary_factor") or 1.0)
        if rotary != 1.0:
            raise UnsupportedModelError(
                f"{folder}: partial_rotary_factor={rotary} (RoPE on part of each head) is not "
                "supported; agentrt rotates whole heads")
        heads = hf.num_attention_heads
        return cls(
            architecture=arch,
            vocab_size=hf.vocab_size,
            hidden_size=hf.hidden_size,
            intermediate_size=hf.intermediate_size,
            num_layers=hf.num_hidden_layers,
            num_heads=heads,
            num_kv_heads=getattr(hf, "num_key_value_heads", None) or heads,
            head_dim=getattr(hf, "head_dim", None) or hf.hidden_size // heads,
            rms_norm_eps=hf.rms_norm_eps,
            rope_theta=_rope_theta(hf),
            rope_scaling=_rope_scaling(hf),
            max_position_embeddings=hf.max_position_embeddings,
            tie_word_embeddings=bool(getattr(hf, "tie_word_embeddings", False)),
            qkv_bias=bool(getattr(hf, "attention_bias", qkv_bias)) or qkv_bias,
            qk_norm=qk_norm,
            eos_token_ids=_eos_ids(hf, folder),
            layer_windows=_layer_windows(hf, folder, arch),
            rope_local_theta=_rope_local_theta(hf),
            query_pre_attn_scalar=getattr(hf, "query_pre_attn_scalar", None),
            moe=MoEConfig.from_hf(hf, hf.num_hidden_layers),
        )


def _rope_params(hf) -> dict[str, Any]:
    """The RoPE parameters of global layers (Gemma 3 keeps one set per layer type)."""
    params = getattr(hf, "rope_parameters", None) or getattr(hf, "rope_scaling", None) or {}
    return dict(params.get("full_attention") or params)


def _rope_theta(hf) -> float:
    return float(_rope_params(hf).get("rope_theta") or getattr(hf, "rope_theta", 10000.0))


def _rope_scaling(hf) -> dict[str, Any] | None:
    params = _rope_params(hf)
    kind = params.get("rope_type") or params.get("type") or "default"
    if kind == "default":
        return None
    scaling = {**params, "rope_type": kind}
    if kind == "longrope" and not scaling.get("factor"):  # transformers' default, kept before
        old_len = scaling["original_max_position_embeddings"]  # the sliding-window cap
        scaling["factor"] = hf.max_position_embeddings / old_len
    return scaling


def _layer_windows(hf, folder: Path, arch: str) -> tuple[int | None, ...]:
    """Each layer's window, where transformers attends within one: the config's
    ``sliding_window`` on the layers its ``layer_types`` marks sliding (all layers where it
    has none). NOTE: a Mistral class default does not count, only a window config.json sets:
    a GGUF file's config.json written before agentrt recorded ``sliding_window`` has none,
    and llama.cpp runs such files without a window."""
    raw = json.loads((folder / "config.json").read_text())
    window = getattr(hf, "sliding_window", None)
    if not window or not (raw.get("sliding_window") or arch in _ALWAYS_WINDOWED):
        return ()
    types = getattr(hf, "layer_types", None) or ["sliding_attention"] * hf.num_hidden_layers
    if "sliding_attention" not in types:
        return ()
    return tuple(int(window) if t == "sliding_attention" else None for t in types)


def _rope_local_theta(hf) -> float | None:
    """Gemma 3's RoPE base for sliding layers (``rope_parameters["sliding_attention"]``, or
    ``rope_local_base_freq`` in older configs)."""
    params = getattr(hf, "rope_parameters", None) or {}
    local = params.get("sliding_attention") if isinstance(params, dict) else None
    if isinstance(local, dict) and local.get("rope_theta"):
        return float(local["rope_theta"])
    value = getattr(hf, "rope_local_base_freq", None)
    return float(value) if value else None


def _eos_ids(hf, folder: Path) -> tuple[int, ...]:
    """config.json's eos ids and generation_config.json's, as transformers' generate stops on
    (Phi-3 names its end of turn, ``<|end|>``, only in the latter)."""
    ids: set[int] = set()
    sources = [hf]
    if (folder / "generation_config.json").is_file():
        from transformers import GenerationConfig

        sources.append(GenerationConfig.from_pretrained(str(folder)))
    for source in sources:
        eos = getattr(source, "eos_token_id", None)
        if eos is not None:
            ids.update(eos if isinstance(eos, list | tuple) else [int(eos)])
    return tuple(sorted(ids))
