"""Turn a model name into the Hugging Face folder the engine reads config and tokenizer from.

:func:`agentrt.models.sources.locate` finds the file or folder (the embedded default, a path,
the Hugging Face cache, Ollama's store); a GGUF file gets one folder in the user cache
(:func:`agentrt.env.cache_dir`), written on first use: config.json and the tokenizer, plus the
weights dequantized to float32 when a float model is asked for (:func:`gguf_folder`). Nothing
is downloaded.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from agentrt import env
from agentrt.models.sources import DEFAULT_MODEL, ModelNotFoundError, default_gguf, locate

__all__ = ["DEFAULT_MODEL", "ModelNotFoundError", "default_gguf", "gguf_folder", "resolve_model"]


def resolve_model(model: str | Path | None = None) -> Path:
    """Return a Hugging Face model folder (config.json + safetensors + tokenizer) for ``model``.

    ``model`` is anything :func:`~agentrt.models.sources.locate` takes: ``None`` (the embedded
    default, or ``$AGENTRT_MODEL``), ``"SmolLM2-135M-Instruct"``, a folder, a ``.gguf`` file, a
    hub id in the local Hugging Face cache, or ``ollama:NAME[:TAG]``. A GGUF file is converted
    to float32 into the cache on first use.
    """
    path, _ = locate(model)
    return path if path.is_dir() else gguf_folder(path, weights=True)


_LAYOUT = 2
"""What a GGUF's cache folder holds, versioned: a change to the conversion (2: every
architecture's end-of-turn ids) gives every file a new folder."""


def gguf_folder(gguf_path: Path, *, weights: bool = False) -> Path:
    """The cache folder of ``gguf_path``: config.json and the tokenizer, and with ``weights``
    also ``model.safetensors`` (float32); written once, reused while the file at that path keeps
    its size and modification time (another file of the same name and size elsewhere -- two
    fine-tunes' ``model-q4_k_m.gguf`` -- or a file replaced in place gets a folder of its own)."""
    from agentrt.models.gguf_convert import convert_gguf

    stat = gguf_path.stat()
    key = f"{gguf_path.resolve()}\0{stat.st_size}\0{stat.st_mtime_ns}\0{_LAYOUT}".encode()
    out = env.cache_dir() / "models" / f"{gguf_path.stem}-{hashlib.sha256(key).hexdigest()[:16]}"
    needed = ("config.json", "tokenizer_config.json", *(("model.safetensors",) if weights else ()))
    if all((out / name).is_file() for name in needed):
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    return convert_gguf(gguf_path, out, weights=weights)
