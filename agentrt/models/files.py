"""Turn a model name into a Hugging Face folder the engine loads.

:func:`agentrt.models.sources.locate` finds the file or folder (the embedded default, a path,
the Hugging Face cache, Ollama's store); a GGUF file is converted once into the user cache
(:func:`agentrt.env.cache_dir`). Nothing is downloaded.
"""

from __future__ import annotations

from pathlib import Path

from agentrt import env
from agentrt.models.sources import DEFAULT_MODEL, ModelNotFoundError, default_gguf, locate

__all__ = ["DEFAULT_MODEL", "ModelNotFoundError", "default_gguf", "resolve_model"]


def resolve_model(model: str | Path | None = None) -> Path:
    """Return a Hugging Face model folder (config.json + safetensors + tokenizer) for ``model``.

    ``model`` is anything :func:`~agentrt.models.sources.locate` takes: ``None`` (the embedded
    default, or ``$AGENTRT_MODEL``), ``"SmolLM2-135M-Instruct"``, a folder, a ``.gguf`` file, a
    hub id in the local Hugging Face cache, or ``ollama:NAME[:TAG]``. A GGUF file is converted
    into the cache on first use.
    """
    path, _ = locate(model)
    return path if path.is_dir() else _cached_conversion(path)


def _cached_conversion(gguf_path: Path) -> Path:
    from agentrt.models.gguf_convert import convert_gguf

    stat = gguf_path.stat()
    out = env.cache_dir() / "models" / f"{gguf_path.stem}-{stat.st_size}"
    if (out / "config.json").is_file() and (out / "model.safetensors").is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    return convert_gguf(gguf_path, out)
