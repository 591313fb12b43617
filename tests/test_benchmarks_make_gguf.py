"""benchmarks/make_gguf.py's writers on a tiny shape: the random llama file has the shapes,
types, tokenizer and weight scale it promises; llama.cpp's quantizer reads it; the F32 copy of a
quantized file holds exactly the values of its blocks and keeps its metadata."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
VOCAB = 320
TINY = dict(hidden_size=256, num_layers=1, num_heads=4, num_kv_heads=2, intermediate_size=512)


@pytest.fixture(scope="module")
def make_gguf():
    spec = importlib.util.spec_from_file_location("make_gguf", BENCHMARKS / "make_gguf.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["make_gguf"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("make_gguf", None)


@pytest.fixture(scope="module")
def tokenizer_source(tmp_path_factory) -> Path:
    """A GGUF holding only a 300-token tokenizer (the real one's 49k strings copy slowly)."""
    path = tmp_path_factory.mktemp("gguf") / "tokenizer.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list([f"t{i}" for i in range(VOCAB)])
    writer.add_token_types([1] * VOCAB)
    writer.add_token_merges(["t 1"])
    writer.add_eos_token_id(VOCAB - 1)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture(scope="module")
def random_f16(make_gguf, tokenizer_source) -> Path:
    path = tokenizer_source.with_name("random-f16.gguf")
    make_gguf.write_random_f16(make_gguf.RandomLlama(**TINY), tokenizer_source, path)
    return path


def test_random_llama_file(make_gguf, random_f16, tokenizer_source):
    reader = gguf.GGUFReader(str(random_f16))
    spec = make_gguf.RandomLlama(**TINY)
    shapes = {t.name: tuple(int(x) for x in reversed(t.shape)) for t in reader.tensors}
    assert shapes == spec.shapes(VOCAB)
    assert sum(int(t.n_elements) for t in reader.tensors) == spec.num_params(VOCAB)
    types = {t.name: t.tensor_type.name for t in reader.tensors}
    assert {types[n] for n in shapes if len(shapes[n]) == 2} == {"F16"}
    assert {types[n] for n in shapes if len(shapes[n]) == 1} == {"F32"}
    fields = reader.fields
    assert fields["llama.attention.head_count_kv"].contents() == 2
    source = gguf.GGUFReader(str(tokenizer_source)).fields
    for key in ("tokenizer.ggml.model", "tokenizer.ggml.tokens", "tokenizer.ggml.merges",
                "tokenizer.ggml.eos_token_id"):
        assert fields[key].contents() == source[key].contents()
    q = np.asarray(reader.get_tensor(2).data, dtype=np.float32)  # blk.0.attn_q
    assert 0.018 < q.std() < 0.022 and np.isfinite(q).all()


def test_quantize_then_f32_copy(make_gguf, random_f16, tmp_path):
    pytest.importorskip("llama_cpp")
    q8 = tmp_path / "q8_0.gguf"
    make_gguf.quantize(random_f16, q8, "Q8_0", threads=1, verbose=False)
    reader = gguf.GGUFReader(str(q8))
    assert {t.tensor_type.name for t in reader.tensors} == {"Q8_0", "F32"}

    f32 = tmp_path / "f32.gguf"
    make_gguf.write_f32(q8, f32)
    copy = gguf.GGUFReader(str(f32))
    assert [t.name for t in copy.tensors] == [t.name for t in reader.tensors]
    for src, dst in zip(reader.tensors, copy.tensors, strict=True):
        assert dst.tensor_type.name == "F32"
        expected = gguf.quants.dequantize(src.data, src.tensor_type)
        np.testing.assert_array_equal(np.asarray(dst.data).reshape(expected.shape), expected)
    assert copy.fields["general.file_type"].contents() == int(gguf.LlamaFileType.ALL_F32)
    for key in ("tokenizer.ggml.tokens", "llama.block_count", "llama.rope.freq_base"):
        assert copy.fields[key].contents() == reader.fields[key].contents()


def test_random_moe_file_is_read_by_llamacpp_and_agentrt(make_gguf, tokenizer_source, tmp_path):
    """The random qwen3moe file: llama.cpp quantizes it (its routers stay F32), agentrt reads
    the experts' metadata and stacked shapes."""
    pytest.importorskip("llama_cpp")
    from agentrt.models.gguf_file import GGUFFile

    spec = importlib.util.spec_from_file_location("_random_moe", BENCHMARKS / "_random_moe.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["_random_moe"] = module
    try:
        spec.loader.exec_module(module)
        moe = module.RandomMoE(hidden_size=256, num_layers=1, num_heads=4, num_kv_heads=2,
                               head_dim=64, num_experts=4, num_experts_per_tok=2,
                               moe_intermediate_size=256)
    finally:
        sys.modules.pop("_random_moe", None)
    f16, q8 = tmp_path / "moe-f16.gguf", tmp_path / "moe-q8_0.gguf"
    make_gguf.write_random_f16(moe, tokenizer_source, f16)
    make_gguf.quantize(f16, q8, "Q8_0", threads=1, verbose=False)
    types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(str(q8)).tensors}
    assert types["blk.0.ffn_gate_inp.weight"] == "F32" and types["blk.0.ffn_up_exps.weight"] \
        == "Q8_0"
    file = GGUFFile(q8)
    assert file.config["num_experts"] == 4 and file.config["norm_topk_prob"]
    assert file.tensors["model.layers.0.mlp.experts.down_proj.weight"].shape == (4, 256, 256)
    assert 0 < moe.active_params(VOCAB) < moe.num_params(VOCAB)
