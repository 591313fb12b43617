"""Where the forward pass gets its parameters: a :class:`Weights` source, by Hugging Face name.

The forward pass (:class:`agentrt.models.llama.LlamaModel`) asks for a float tensor (norms,
biases), an embedding, a linear layer made of one or more weights' rows (fused QKV, gate/up)
or the output head; the source decides their form. :class:`FloatWeights` holds float tensors
and builds each linear with the layer class that ``quantization`` names in
:data:`~agentrt.models.linear.LINEARS`; :class:`agentrt.models.gguf_weights.GGUFWeights` keeps
a GGUF file's own blocks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch
import torch.nn.functional as F

from agentrt.models.linear import HEAD, Linear, get_linear

__all__ = ["ConcatLinear", "Embedding", "FloatWeights", "TensorEmbedding", "Weights"]


class Embedding(Protocol):
    def __call__(self, ids: torch.Tensor) -> torch.Tensor: ...


class Weights(Protocol):
    """A model's parameters by Hugging Face name (``model.layers.0.self_attn.q_proj.weight``)."""

    def __contains__(self, name: str) -> bool: ...

    def tensor(self, name: str) -> torch.Tensor:
        """A float tensor in the model's dtype on its device (norms, biases)."""
        ...

    def linear(self, names: Sequence[str], biases: Sequence[str] = ()) -> Linear:
        """A linear layer whose output rows are those of ``names`` in order, plus the
        concatenated ``biases`` when every one of them is present."""
        ...

    def experts(self, prefix: str, parts: Sequence[str], num_experts: int) -> list[Linear]:
        """One linear layer per expert, its output rows those of ``parts`` in order: each
        part stored stacked (``prefix + part + ".weight"``, (experts, out, in), as GGUF files
        keep them) or per expert (``prefix + f"{e}.{part}.weight"``, as HF folders do)."""
        ...

    def embedding(self, name: str) -> Embedding:
        """Token ids -> rows of ``name``."""
        ...

    def head(self, name: str) -> Linear:
        """The output head on ``name`` (``lm_head.weight``, or the tied embedding)."""
        ...


class TensorEmbedding:
    """An embedding lookup in a float table."""

    def __init__(self, weight: torch.Tensor) -> None:
        self.weight = weight

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, self.weight)


class ConcatLinear:
    """Several linear layers on the same input, outputs side by side: a fused layer whose parts
    are stored in different formats (a GGUF Q4_K_M file keeps ``attn_v`` as Q6_K)."""

    def __init__(self, parts: Sequence[Linear]) -> None:
        self.parts = list(parts)

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        return torch.cat([part(h) for part in self.parts], dim=-1)


class FloatWeights:
    """Float tensors, moved to ``dtype`` / ``device`` as they are asked for; linear layers of the
    class that ``quantization`` names (:func:`~agentrt.models.linear.get_linear`)."""

    def __init__(self, tensors: dict[str, torch.Tensor], dtype: torch.dtype,
                 quantization: str = "none", device: str | torch.device = "cpu") -> None:
        self._tensors, self.dtype, self.device = tensors, dtype, torch.device(device)
        self._linear = get_linear(quantization, dtype)
        self._head = get_linear(HEAD.get(quantization, quantization), dtype)
        self._moved: dict[str, torch.Tensor] = {}

    def __contains__(self, name: str) -> bool:
        return name in self._tensors

    def tensor(self, name: str) -> torch.Tensor:
        if name not in self._moved:  # the tied embedding is asked for twice: moved once
            self._moved[name] = self._tensors[name].to(self.device, self.dtype).contiguous()
        return self._moved[name]

    def linear(self, names: Sequence[str], biases: Sequence[str] = ()) -> Linear:
        parts = [self.tensor(n) for n in names]
        bias = None
        if biases and all(b in self for b in biases):
            bias = torch.cat([self.tensor(b) for b in biases])
        return self._linear(parts[0] if len(parts) == 1 else torch.cat(parts), bias)

    def experts(self, prefix: str, parts: Sequence[str], num_experts: int) -> list[Linear]:
        def rows(part: str, e: int) -> torch.Tensor:
            stacked = f"{prefix}{part}.weight"
            if stacked in self:
                return self.tensor(stacked)[e]
            return self._tensors[f"{prefix}{e}.{part}.weight"].to(self.device, self.dtype)

        layers = []
        for e in range(num_experts):
            weights = [rows(part, e) for part in parts]
            layers.append(self._linear(torch.cat(weights) if len(weights) > 1 else weights[0]))
        return layers

    def embedding(self, name: str) -> Embedding:
        return TensorEmbedding(self.tensor(name))

    def head(self, name: str) -> Linear:
        return self._head(self.tensor(name))
