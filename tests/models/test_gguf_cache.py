"""The cache folder a GGUF file is converted into (config, tokenizer, float32 weights) belongs
to that file: another file of the same name and size, or the file replaced in place, never
reuses it (two fine-tunes' ``model-q4_k_m.gguf`` have the same size)."""

from __future__ import annotations

import os
import shutil
import types

import gguf
import pytest
import torch
from gguf_models import write_random_llama
from safetensors.torch import load_file

from agentrt.models.files import gguf_folder

pytestmark = pytest.mark.usefixtures("private_cache")  # not the user's cache

CFG = types.SimpleNamespace(hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                            num_attention_heads=4, num_key_value_heads=2,
                            max_position_embeddings=64, vocab_size=512, rope_theta=1e4,
                            rms_norm_eps=1e-5)


def _embedding(folder) -> torch.Tensor:
    return load_file(str(folder / "model.safetensors"))["model.embed_tokens.weight"]


def _overwrite_first_weights(path, value: float) -> None:
    """The token embedding's first 16 floats set to ``value``, size unchanged."""
    reader = gguf.GGUFReader(str(path))
    offset = next(int(t.data_offset) for t in reader.tensors if t.name == "token_embd.weight")
    del reader
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(torch.full((16,), value).numpy().tobytes())


def test_same_name_and_size_elsewhere_or_in_place_gets_its_own_folder(tmp_path):
    f32 = gguf.GGMLQuantizationType.F32
    first = write_random_llama(tmp_path / "model.gguf", CFG, lambda _: f32)
    (tmp_path / "other").mkdir()
    second = tmp_path / "other" / "model.gguf"
    shutil.copyfile(first, second)
    _overwrite_first_weights(second, 7.0)
    assert first.stat().st_size == second.stat().st_size

    folders = [gguf_folder(p, weights=True) for p in (first, second)]
    assert folders[0] != folders[1]
    assert _embedding(folders[0])[0, 0] != 7.0 and _embedding(folders[1])[0, 0] == 7.0
    assert gguf_folder(first, weights=True) == folders[0]  # unchanged: reused

    _overwrite_first_weights(first, -3.0)  # replaced in place, same size
    os.utime(first, ns=(first.stat().st_atime_ns, first.stat().st_mtime_ns + 10**9))
    again = gguf_folder(first, weights=True)
    assert again != folders[0] and _embedding(again)[0, 0] == -3.0
