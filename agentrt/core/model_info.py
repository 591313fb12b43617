"""ModelInfo: what a front end needs to know about the model behind an engine or backend."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ModelInfo"]


@dataclass(frozen=True)
class ModelInfo:
    """The served model, as front ends see it (served name, limits, special tokens)."""

    name: str
    """The model as the user named it (a path, a hub id, ``ollama:NAME``, or the default)."""
    path: str
    """Where its weights and tokenizer were loaded from (a local folder or file)."""
    architecture: str
    """The model family's class name (e.g. ``LlamaForCausalLM``)."""
    max_model_len: int
    """Most tokens one sequence can hold (prompt + generated)."""
    vocab_size: int
    eos_token_ids: tuple[int, ...]
    """Token ids that end generation unless ``ignore_eos``."""
