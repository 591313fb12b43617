"""Write a GGUF file of the Llama family as a Hugging Face folder in the user cache.

Two forms, one folder per file (:func:`agentrt.models.files.gguf_folder`): ``config.json`` and
the tokenizer (transformers' GGUF support converts the vocabulary) are what a model kept in the
file's own block formats needs next to the file; ``quantization="none"`` also asks for
``model.safetensors``, every tensor dequantized to float32 by the ``gguf`` package's reference
(:class:`~agentrt.models.gguf_file.GGUFFile` names them and undoes llama's Q/K row interleaving).
Later loads read the folder in well under a second.
"""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

from agentrt.models.gguf_file import GGUF_ARCHITECTURES, GGUFFile

__all__ = ["GGUF_ARCHITECTURES", "convert_gguf"]


def convert_gguf(gguf_path: Path, out_dir: Path, *, weights: bool = True,
                 source: dict | None = None) -> Path:
    """Write a Hugging Face folder for ``gguf_path`` into ``out_dir`` and return it: config.json,
    the tokenizer, with ``weights`` float32 ``model.safetensors``, and with ``source`` that
    dict as ``source.json`` (what :func:`agentrt.models.files.prune_gguf_folders` reads).

    Raises :class:`~agentrt.models.config.UnsupportedModelError` for other architectures and
    ``ValueError`` naming the file for a broken one (its tokenizer included). Writes into a
    temporary sibling folder of its own (``{out_dir.name}.*.partial``) and renames it at the
    end, replacing a folder written before without the weights, so an interrupted or refused
    conversion never leaves a half-written cache entry behind and two processes converting the
    same file do not write into each other's folder.
    """
    file = GGUFFile(gguf_path)
    tmp = out_dir.with_name(f"{out_dir.name}.{uuid.uuid4().hex}.partial")
    tmp.mkdir(parents=True)
    try:
        _save_tokenizer(gguf_path, tmp)  # first: the part most likely to refuse a file
        if weights:
            _save_weights(file, tmp)
        (tmp / "config.json").write_text(json.dumps(file.config, indent=2))
        if source is not None:
            (tmp / "source.json").write_text(json.dumps(source, indent=2))
        _install(tmp, out_dir)
    finally:  # a refused or interrupted conversion, or one another process finished first
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


def _install(tmp: Path, out_dir: Path) -> None:
    """Rename ``tmp`` to ``out_dir``; an existing ``out_dir`` is replaced unless it already
    holds every file ``tmp`` does (another process wrote the same conversion first)."""
    for _ in range(3):
        if out_dir.is_dir():
            if all((out_dir / p.name).is_file() for p in tmp.iterdir()):
                return
            shutil.rmtree(out_dir, ignore_errors=True)
        try:
            tmp.rename(out_dir)
            return
        except OSError:  # written by another process between the check and the rename
            continue
    tmp.rename(out_dir)  # still refused: the error says why


def _save_weights(file: GGUFFile, out: Path) -> None:
    from safetensors.numpy import save_file
    from tqdm.auto import tqdm

    tensors = {}
    bar = tqdm(file.tensors.items(), desc=f"agentrt: converting {file.path.name}", unit="tensor")
    for name, tensor in bar:
        tensors[name] = tensor.dequantize().numpy()
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})


def _save_tokenizer(gguf_path: Path, out: Path) -> None:
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    except Exception as exc:  # noqa: BLE001 - transformers raises many kinds for a bad vocabulary
        raise ValueError(f"{gguf_path}: the GGUF file's tokenizer cannot be read "
                         f"({type(exc).__name__}: {exc})") from None
    tok.save_pretrained(str(out))
