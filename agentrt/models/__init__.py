"""Models: locate weights on disk, read the config, build agentrt's own forward pass.

``load_model`` is the front door: it locates a model name, file or folder, checks the
architecture against the registry and returns the tokenizer and a :class:`LlamaModel` holding
the weights: a GGUF file's own block formats by default (``quantization="auto"``), or float
weights in the requested dtype (a GGUF file dequantized once into the cache).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from agentrt.models.config import SUPPORTED_ARCHITECTURES, ModelConfig, UnsupportedModelError
from agentrt.models.files import DEFAULT_MODEL, ModelNotFoundError, gguf_folder, resolve_model
from agentrt.models.linear import resolve_quantization
from agentrt.models.llama import LlamaModel
from agentrt.models.sources import LocalModel, list_local_models, locate
from agentrt.models.weights import FloatWeights, Weights

__all__ = [
    "DEFAULT_MODEL",
    "SUPPORTED_ARCHITECTURES",
    "LlamaModel",
    "LoadedModel",
    "LocalModel",
    "ModelConfig",
    "ModelNotFoundError",
    "UnsupportedModelError",
    "list_local_models",
    "load_model",
    "load_tokenizer",
    "locate",
    "resolve_model",
]


@dataclass(frozen=True)
class LoadedModel:
    """What :func:`load_model` returns."""

    path: Path
    """The Hugging Face folder of config and tokenizer (a GGUF file's lives in the cache)."""
    config: ModelConfig
    model: LlamaModel
    tokenizer: object  # a transformers PreTrainedTokenizerBase
    quantization: str = "none"
    """The weight format the model runs in: "gguf" (the file's own) or a name in LINEARS."""


def load_tokenizer(folder: Path):
    """The model's own tokenizer and chat template, through transformers."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))


def load_model(model: str | Path | None = None, dtype: torch.dtype = torch.float32,
               quantization: str = "auto", fused_ops: bool = False,
               device: str | torch.device = "cpu", gguf_activations: str = "auto",
               ) -> LoadedModel:
    """Locate ``model`` (see :func:`resolve_model`), read its weights and tokenizer.

    ``quantization`` names the weights' format: "auto" = "gguf" for a GGUF file in float32 on
    the CPU, else "none"; "gguf" keeps the file's own block formats (each linear runs on
    agentrt's kernels, memory about the file's size); "none", "int8", "int4" build float
    weights (a GGUF file is dequantized to float32 once into the cache) and the linear layers
    :data:`~agentrt.models.linear.LINEARS` names. ``gguf_activations`` is how the block weights
    meet the activations ("auto", "float32" or "int8": see ``EngineConfig.gguf_activations``).
    ``fused_ops`` runs RMSNorm and RoPE as agentrt's C++ ops; the weights are moved to
    ``device`` as they load.
    """
    path, _ = locate(model)
    try:
        return _load(path, dtype, quantization, fused_ops, device, gguf_activations)
    except UnsupportedModelError as exc:
        if model is None or str(model) in str(exc):
            raise
        # NOTE: a name's file may say nothing to its user (an Ollama blob is sha256-...)
        raise UnsupportedModelError(f"{model}: {exc}") from exc


def _load(path: Path, dtype: torch.dtype, quantization: str, fused_ops: bool,
          device: str | torch.device, gguf_activations: str) -> LoadedModel:
    """:func:`load_model` on the located ``path``."""
    quantization = resolve_quantization(quantization, path.is_file(), device, dtype)
    weights: Weights
    if quantization == "gguf":
        from agentrt.models.gguf_file import GGUFFile
        from agentrt.models.gguf_weights import GGUFWeights

        if dtype != torch.float32:
            raise ValueError("quantization='gguf' computes in float32; use dtype='float32'")
        # refuses what it cannot run, first
        weights = GGUFWeights(GGUFFile(path), device, activations=gguf_activations)
        folder = gguf_folder(path)
        config = ModelConfig.from_folder(folder)
    else:
        folder = path if path.is_dir() else gguf_folder(path, weights=True)
        config = ModelConfig.from_folder(folder)  # refuses other architectures, first
        weights = FloatWeights(_read_safetensors(folder), dtype, quantization, device)
    net = _decoder(config.architecture)(config, weights, dtype, fused_ops, device)
    return LoadedModel(folder, config, net, load_tokenizer(folder), quantization)


_DECODERS = {"Gemma3ForCausalLM": "agentrt.models.gemma3:Gemma3Model"}
"""Architectures whose forward pass is not :class:`LlamaModel`'s -> ``"module:class"``."""


def _decoder(architecture: str) -> type[LlamaModel]:
    """The forward pass class of ``architecture`` (imported when a model needs it)."""
    from importlib import import_module

    if architecture not in _DECODERS:
        return LlamaModel
    module, name = _DECODERS[architecture].split(":")
    return getattr(import_module(module), name)


def _read_safetensors(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ModelNotFoundError(f"{folder} holds no .safetensors weights")
    weights: dict[str, torch.Tensor] = {}
    for f in files:
        weights.update(load_file(str(f)))
    return weights
