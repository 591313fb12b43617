"""Turn a model name into the Hugging Face folder the engine reads config and tokenizer from.

:func:`agentrt.models.sources.locate` finds the file or folder (the embedded default, a path,
the Hugging Face cache, Ollama's store); a GGUF file gets one folder in the user cache
(:func:`agentrt.env.cache_dir` ``/ "models"``), written on first use: config.json and the
tokenizer, plus the weights dequantized to float32 when a float model is asked for
(:func:`gguf_folder`). Each folder records its source file in ``source.json``; writing a new
folder first removes the stale ones (:func:`prune_gguf_folders`), so the cache holds about one
folder per GGUF file still on the machine. Nothing is downloaded.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import time
from pathlib import Path

from agentrt import env
from agentrt.models.sources import DEFAULT_MODEL, ModelNotFoundError, default_gguf, locate

__all__ = ["DEFAULT_MODEL", "ModelNotFoundError", "default_gguf", "gguf_folder",
           "prune_gguf_folders", "resolve_model"]

logger = logging.getLogger(__name__)


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
_FOLDER = re.compile(r".+-[0-9a-f]{16}")
"""A cache folder's name: ``{stem}-{16 hex digits of the key}``."""
_PARTIAL = re.compile(r".+-[0-9a-f]{16}(\.\w+)?\.partial")
"""A conversion in progress (:func:`~agentrt.models.gguf_convert.convert_gguf`)."""
PARTIAL_MAX_AGE_S = 3600.0
"""A ``.partial`` folder untouched this long is a crashed conversion's leftover."""


def gguf_folder(gguf_path: Path, *, weights: bool = False) -> Path:
    """The cache folder of ``gguf_path``: config.json and the tokenizer, and with ``weights``
    also ``model.safetensors`` (float32); written once, reused while the file at that path keeps
    its size and modification time (another file of the same name and size elsewhere -- two
    fine-tunes' ``model-q4_k_m.gguf`` -- or a file replaced in place gets a folder of its own).

    Only when a folder is about to be written are the stale ones removed first
    (:func:`prune_gguf_folders`); a folder that is reused costs a ``stat`` and nothing more.
    """
    from agentrt.models.gguf_convert import convert_gguf

    stat = gguf_path.stat()
    source = {"path": str(gguf_path.resolve()), "size": stat.st_size,
              "mtime_ns": stat.st_mtime_ns, "layout": _LAYOUT}
    key = f"{source['path']}\0{stat.st_size}\0{stat.st_mtime_ns}\0{_LAYOUT}".encode()
    out = env.cache_dir() / "models" / f"{gguf_path.stem}-{hashlib.sha256(key).hexdigest()[:16]}"
    needed = ("config.json", "tokenizer_config.json", *(("model.safetensors",) if weights else ()))
    if all((out / name).is_file() for name in needed):
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    prune_gguf_folders(keep=out)
    return convert_gguf(gguf_path, out, weights=weights, source=source)


def prune_gguf_folders(keep: Path | None = None) -> list[Path]:
    """Remove the stale folders of ``cache_dir()/models`` and return them.

    Stale: a ``{stem}-{16 hex}`` folder whose ``source.json`` names a file that is gone or has
    another size or modification time, or an older layout than this agentrt writes; one
    without ``source.json`` (written before agentrt recorded it); a ``.partial`` folder (a
    conversion in progress) untouched for :data:`PARTIAL_MAX_AGE_S` (a crashed one). Kept:
    ``keep``, folders whose source is unchanged (a newer agentrt's layout included), fresh
    ``.partial`` folders, and every name of another form. A folder that cannot be removed, or
    that another process removed first, is passed over silently; what was freed is logged at
    INFO.
    """
    root = env.cache_dir() / "models"
    try:
        entries = [p for p in root.iterdir() if p != keep and _is_stale(p)]
    except OSError:  # no cache yet, or unreadable
        return []
    removed, freed = [], 0
    for path in entries:
        size = _tree_size(path)
        try:
            shutil.rmtree(path)
        except OSError:  # not ours to remove, or another process's prune got there first
            continue
        removed.append(path)
        freed += size
    if removed:
        logger.info("agentrt: removed %d stale model cache folder(s) from %s, %.1f MB freed: %s",
                    len(removed), root, freed / 1e6, ", ".join(p.name for p in removed))
    return removed


def _is_stale(path: Path) -> bool:
    if path.is_symlink() or not path.is_dir():
        return False
    if _PARTIAL.fullmatch(path.name):
        try:
            return time.time() - _last_write(path) > PARTIAL_MAX_AGE_S
        except OSError:  # finished (renamed) or removed meanwhile
            return False
    if not _FOLDER.fullmatch(path.name):
        return False
    try:
        source = json.loads((path / "source.json").read_text())
        stat = os.stat(source["path"])
        return (source["layout"] < _LAYOUT or stat.st_size != source["size"]
                or stat.st_mtime_ns != source["mtime_ns"])
    except FileNotFoundError:  # no source.json (an older agentrt's folder), or the file is gone
        return path.exists()
    except (OSError, ValueError, KeyError, TypeError):  # unreadable: a damaged folder
        return True


def _last_write(path: Path) -> float:
    """The newest modification time of ``path`` and its entries (a file being written moves)."""
    times = [path.stat().st_mtime]
    for entry in os.scandir(path):
        try:
            times.append(entry.stat(follow_symlinks=False).st_mtime)
        except OSError:
            pass
    return max(times)


def _tree_size(path: Path) -> int:
    total = 0
    for folder, _, names in os.walk(path):
        for name in names:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                pass
    return total
