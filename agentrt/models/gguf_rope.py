"""The RoPE scaling a GGUF file stands for, as a Hugging Face ``rope_scaling`` dict.

Three forms reach agentrt's RoPE tables (:mod:`agentrt.models.rope`) from a file:

- factor vectors (F32 tensors, one value per rotated pair, each finite and above 0): Phi-3's
  ``rope_factors_short``/``rope_factors_long`` are its ``longrope`` parameters; Llama 3.1+'s
  ``rope_freqs`` is llama.cpp's converter's form of the ``llama3`` scaling, and llama.cpp
  divides each frequency by its factor at every position: transformers' ``longrope`` with the
  vector as both its short and long factors and no attention scaling;
- the metadata's ``{arch}.rope.scaling.type``, ``linear`` or ``yarn``, with its factor,
  original context and YaRN parameters;
- neither: plain RoPE.

A bad vector or number is a ``ValueError``, a scaling agentrt does not run an
``UnsupportedModelError`` (:class:`~agentrt.models.gguf_file.GGUFFile` names the file).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentrt.models.config import UnsupportedModelError
from agentrt.models.gguf_checks import MAX_CONTEXT

if TYPE_CHECKING:
    from agentrt.models.gguf_header import HeaderTensor

__all__ = ["ROPE_FACTORS", "factor_vector", "rope_scaling"]

ROPE_FACTORS = {  # per architecture: RoPE factor vectors (F32 tensors) -> their name here
    "llama": {"rope_freqs.weight": "freq_factors"},
    "phi3": {"rope_factors_short.weight": "short_factor",
             "rope_factors_long.weight": "long_factor"},
}


def factor_vector(path: Path, t: HeaderTensor, head_dim: int) -> list[float]:
    """A RoPE factor vector's values: F32, one per rotated pair of a head, each finite and
    positive (each frequency is divided by its factor)."""
    from gguf import GGMLQuantizationType

    qtype = GGMLQuantizationType(t.tensor_type)
    dims = [int(d) for d in t.shape]
    if qtype != GGMLQuantizationType.F32 or len(dims) != 1:
        raise ValueError(f"{path}: RoPE factor tensor {t.name!r} is a {qtype.name} tensor of "
                         f"shape {dims[::-1]}; llama.cpp reads an F32 vector")
    if dims[0] != head_dim // 2:
        raise ValueError(f"{path}: RoPE factor tensor {t.name!r} has {dims[0]} values; a head "
                         f"of {head_dim} needs {head_dim // 2} (one per rotated pair)")
    values = [float(x) for x in t.data.reshape(-1)]
    bad = next((i for i, v in enumerate(values) if not (math.isfinite(v) and v > 0)), None)
    if bad is not None:
        raise ValueError(f"{path}: RoPE factor tensor {t.name!r} holds {values[bad]} at "
                         f"{bad} (each frequency is divided by its factor: finite, above 0)")
    return values


def rope_scaling(meta: dict, arch: str, config: dict[str, Any],
                  factors: dict[str, list[float]]) -> dict[str, Any] | None:
    """The rope_scaling of the file: its RoPE factor vectors', or else the one its metadata
    names (``{arch}.rope.scaling.type``), or None for plain RoPE.

    NOTE: llama.cpp applies a metadata scaling on top of factor vectors; transformers has no
    such composition, so a file with both is refused (the converter writes none: Llama 3.1's
    ``llama3`` is its vector alone, Phi-3's type, where written, is ``longrope``)."""
    kind = meta.get(f"{arch}.rope.scaling.type", "none")
    if factors and kind not in ("none", "longrope"):
        tensors = sorted(t for t, n in ROPE_FACTORS[arch].items() if n in factors)
        raise UnsupportedModelError(
            f"RoPE factor tensors {tensors} and a {kind!r} RoPE scaling in "
            f"{arch}.rope.scaling.type: llama.cpp applies both, agentrt runs one or the other")
    if "freq_factors" in factors:
        return _freq_factors(config, factors["freq_factors"])
    if factors:
        return _longrope(meta, arch, config, factors)
    if kind == "none":
        return None
    if kind == "linear":
        return {"rope_type": "linear", "factor": _positive(meta, f"{arch}.rope.scaling.factor")}
    if kind == "longrope":
        raise UnsupportedModelError(f"a 'longrope' RoPE scaling ({arch}.rope.scaling.type) "
                                    "without its factor tensors (rope_factors_short/long)")
    if kind == "yarn":
        return _yarn(meta, arch, config)
    raise UnsupportedModelError(f"RoPE scaling {kind!r} ({arch}.rope.scaling.type) is not "
                                "supported; agentrt reads 'none', 'linear' and 'yarn'")


def _positive(meta: dict, key: str) -> float:
    """The metadata number ``key``: there, finite and above 0."""
    value = meta.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            math.isfinite(value) and value > 0):
        raise ValueError(f"invalid GGUF model metadata: {key} = {value!r} (expected a "
                         "finite number above 0)")
    return float(value)


_YARN_KEYS = {"yarn_beta_fast": "beta_fast", "yarn_beta_slow": "beta_slow",
              "yarn_attn_factor": "attention_factor"}  # llama.cpp's key -> transformers'


def _yarn(meta: dict, arch: str, config: dict[str, Any]) -> dict[str, Any]:
    """The ``yarn`` rope_scaling of a file, from the keys llama.cpp's converter writes (the
    original context defaults to the model's, as in llama.cpp). ``yarn_attn_factor`` is
    transformers' ``attention_factor``, which the converter writes it from."""
    prefix = f"{arch}.rope.scaling."
    for key, neutral in (("yarn_ext_factor", 1.0), ("yarn_log_multiplier", 0.0)):
        if meta.get(prefix + key, neutral) != neutral:
            raise UnsupportedModelError(f"YaRN with {prefix}{key} = {meta[prefix + key]!r} "
                                        f"is not supported (transformers' yarn: {neutral})")
    key = prefix + "original_context_length"
    old_len = meta.get(key, config.get("max_position_embeddings"))
    if isinstance(old_len, bool) or not isinstance(old_len, int) or not (
            0 < old_len <= MAX_CONTEXT):
        raise ValueError(f"invalid GGUF model metadata: {key} = {old_len!r} (expected an "
                         f"integer from 1 to {MAX_CONTEXT})")
    scaling = {"rope_type": "yarn", "factor": _positive(meta, prefix + "factor"),
               "original_max_position_embeddings": int(old_len)}
    for gguf_key, hf_key in _YARN_KEYS.items():
        if prefix + gguf_key in meta:
            scaling[hf_key] = _positive(meta, prefix + gguf_key)
    return scaling


def _freq_factors(config: dict[str, Any], values: list[float]) -> dict[str, Any]:
    """A llama file's ``rope_freqs`` (Llama 3.1+: the converter's form of the ``llama3``
    scaling) as transformers' ``longrope``: llama.cpp divides each frequency by its factor at
    every position, with no attention scaling. With the same short and long factors the
    original context (here the model's own) picks nothing."""
    old_len = config.get("max_position_embeddings") or MAX_CONTEXT
    return {"rope_type": "longrope", "short_factor": values, "long_factor": values,
            "original_max_position_embeddings": old_len, "factor": 1.0,
            "attention_factor": 1.0}


def _longrope(meta: dict, arch: str, config: dict[str, Any],
              factors: dict[str, list[float]]) -> dict[str, Any]:
    """The ``longrope`` rope_scaling of a long-context Phi-3 file, from its factor vectors."""
    old_len = meta.get(f"{arch}.rope.scaling.original_context_length")
    if set(factors) != {"short_factor", "long_factor"} or not (isinstance(old_len, int)
                                                               and 0 < old_len <= MAX_CONTEXT):
        raise UnsupportedModelError(
            f"RoPE factor vectors {sorted(factors)} without both short and long factors and "
            f"{arch}.rope.scaling.original_context_length: an unknown RoPE scaling")
    config["original_max_position_embeddings"] = int(old_len)  # Phi3Config reads it from here
    scaling = {"rope_type": "longrope", "original_max_position_embeddings": int(old_len),
               **factors}
    if f"{arch}.rope.scaling.attn_factor" in meta:
        scaling["attention_factor"] = float(meta[f"{arch}.rope.scaling.attn_factor"])
    return scaling
