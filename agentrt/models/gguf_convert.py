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
from pathlib import Path

from agentrt.models.gguf_file import GGUF_ARCHITECTURES, GGUFFile

__all__ = ["GGUF_ARCHITECTURES", "convert_gguf"]


def convert_gguf(gguf_path: Path, out_dir: Path, *, weights: bool = True) -> Path:
    """Write a Hugging Face folder for ``gguf_path`` into ``out_dir`` and return it: config.json,
    the tokenizer and, with ``weights``, float32 ``model.safetensors``.

    Raises :class:`~agentrt.models.config.UnsupportedModelError` for other architectures and
    ``ValueError`` naming the file for a broken one (its tokenizer included). Writes into a
    temporary sibling folder first and renames it at the end, so an interrupted or refused
    conversion never leaves a half-written cache entry behind.
    """
    file = GGUFFile(gguf_path)
    tmp = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        _save_tokenizer(gguf_path, tmp)  # first: the part most likely to refuse a file
        if weights:
            _save_weights(file, tmp)
        (tmp / "config.json").write_text(json.dumps(file.config, indent=2))
    except BaseException:  # a refused or interrupted conversion leaves nothing behind
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp.rename(out_dir)
    return out_dir


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
