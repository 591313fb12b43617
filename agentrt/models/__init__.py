"""Models: locate weights on disk, read the config, build agentrt's own forward pass.

``load_model`` is the front door: it resolves a model name or folder (converting the embedded
GGUF default once into the cache), checks the architecture against the registry and returns
the tokenizer and a :class:`LlamaModel` holding the weights in the requested dtype.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from agentrt.models.config import SUPPORTED_ARCHITECTURES, ModelConfig, UnsupportedModelError
from agentrt.models.files import DEFAULT_MODEL, ModelNotFoundError, resolve_model
from agentrt.models.llama import LlamaModel
from agentrt.models.sources import LocalModel, list_local_models, locate

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
    config: ModelConfig
    model: LlamaModel
    tokenizer: object  # a transformers PreTrainedTokenizerBase


def load_tokenizer(folder: Path):
    """The model's own tokenizer and chat template, through transformers."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))


def load_model(model: str | Path | None = None, dtype: torch.dtype = torch.float32,
               quantization: str = "none", fused_ops: bool = False,
               device: str | torch.device = "cpu") -> LoadedModel:
    """Resolve ``model`` (see :func:`resolve_model`), read its weights and tokenizer;
    ``quantization`` names the linear layers' weight format (``LINEARS``); ``fused_ops`` runs
    RMSNorm and RoPE as agentrt's C++ ops; the weights are moved to ``device`` as they load."""
    folder = resolve_model(model)
    config = ModelConfig.from_folder(folder)
    weights = _read_safetensors(folder)
    net = LlamaModel(config, weights, dtype, quantization, fused_ops, device)
    return LoadedModel(folder, config, net, load_tokenizer(folder))


def _read_safetensors(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ModelNotFoundError(f"{folder} holds no .safetensors weights")
    weights: dict[str, torch.Tensor] = {}
    for f in files:
        weights.update(load_file(str(f)))
    return weights
