"""GGUF files run in their own block formats (``quantization="gguf"``, the default for a GGUF).

Each family (Llama, Mistral, Qwen2, Qwen3, Phi-3) is written in each common block format by
``gguf_models`` (k-quants as random valid blocks), transformers is given the very values the
file holds, and agentrt's greedy tokens and every step's logprob must match it. Also: a
long-context Phi-3 file's longrope factors, a Phi-3 sliding window on every layer, mixed
formats in one fused layer (a Q4_K_M file's Q6_K ``attn_v``), a clear refusal of formats the
kernels do not run, resident memory about the file's size for a file over 100 MB, and the real
default model, whose Q4_1 layers give the float32 engine's greedy outputs on the exact path. With
``activations="int8"`` (llama.cpp's numeric path) the engine's greedy tokens and logprobs are
those of the same model on the integer path's torch twin.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import types

import pytest
from gguf_models import (
    CASES,
    IDS,
    KQUANT_SIZED,
    build,
    random_blocks,
    reference,
    tiny_tokenizer,
    write_gguf,
    write_random_llama,
)

from agentrt import Engine, SamplingParams

FORMATS = ["Q8_0", "Q4_K", "Q6_K", "F16"]
MORE_FORMATS = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q5_K", "BF16"]
IDS_SMALL = [i % 500 for i in IDS]  # the tiny tokenizer's 512 tokens


pytestmark = pytest.mark.usefixtures("private_cache")  # see conftest.py


def qtype(name: str):
    import gguf

    return gguf.GGMLQuantizationType[name]


def run(path, steps: int = 6, activations: str = "float32"):
    """Greedy tokens and each step's logprobs; prefill of 64-row chunks (the tiled GEMM path),
    then decode rows (the kernels). ``activations``: float32 (exact, whatever "auto" picks) or
    int8."""
    from agentrt_kernels.cpu.gguf_linear import GGUFLinear

    engine = Engine(str(path), num_blocks=64, max_num_batched_tokens=64,
                    gguf_activations=activations)
    try:
        assert engine.config.resolved_quantization == "gguf"
        model = engine.core.model
        assert isinstance(model.layers[0].o_proj, GGUFLinear)
        assert not (engine.core.model_path / "model.safetensors").exists()  # no float copy
        return engine.generate(IDS_SMALL, SamplingParams(max_tokens=steps, ignore_eos=True,
                                                         logprobs=0)), model
    finally:
        engine.close()


def check_against_transformers(case: str, formats, tmp_path, **config):
    hf, arch, name = build(case, **{**KQUANT_SIZED, **config})
    path = write_gguf(hf, tmp_path / f"{case}.gguf", arch, name, formats, sync=True,
                      tokenizer=tiny_tokenizer)
    out, model = run(path)
    tokens, logprobs = reference(hf, IDS_SMALL)
    assert out.token_ids == tokens
    for step, token in enumerate(tokens):
        assert abs(out.logprobs[step][token] - float(logprobs[step, token])) < 1e-3
    return model


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_each_family_in_each_format_matches_transformers(case, fmt, tmp_path):
    extra = dict(head_dim=64) if case == "qwen3" else {}  # o_proj rows of 256 for k-quants
    check_against_transformers(case, qtype(fmt), tmp_path, **extra)


def test_a_long_context_phi3_file_runs_on_its_long_rope_factors(tmp_path):
    """Phi-3.5-style: factor vectors as tensors; 100 tokens past an original context of 64."""
    from agentrt.models.gguf_file import GGUFFile

    short, long = [1.0 + 0.05 * i for i in range(32)], [1.5 + 0.5 * i for i in range(32)]
    rope = {"rope_type": "longrope", "short_factor": short, "long_factor": long}
    model = check_against_transformers("phi3", qtype("Q4_K"), tmp_path, rope_scaling=rope,
                                       original_max_position_embeddings=64)
    scaling = GGUFFile(tmp_path / "phi3.gguf").config["rope_scaling"]
    assert scaling["long_factor"] == pytest.approx(long)
    assert scaling["attention_factor"] == pytest.approx((1 + math.log(8) / math.log(64)) ** 0.5)
    assert model.config.rope_scaling["rope_type"] == "longrope"


def test_a_phi3_file_s_sliding_window_is_its_layers_window_and_its_end_token_stops(tmp_path):
    """``<|end|>`` (Phi-3's end of a chat turn) is found in the vocabulary, as llama.cpp does
    for files that name no ``eot_token_id``."""
    hf, arch, name = build("phi3", **KQUANT_SIZED, sliding_window=96)
    path = write_gguf(hf, tmp_path / "phi3.gguf", arch, name, qtype("Q8_0"),
                      tokenizer=tiny_tokenizer)
    engine = Engine(str(path), num_blocks=64)
    try:
        assert engine.core.backend.windows == (96,) * engine.core.model_config.num_layers
        assert engine.max_model_len > 96
        assert {257, 511} <= engine.core.eos_token_ids
    finally:
        engine.close()


@pytest.mark.parametrize("fmt", MORE_FORMATS)
def test_the_other_block_formats_match_transformers(fmt, tmp_path):
    check_against_transformers("llama", qtype(fmt), tmp_path)


def test_a_q4_k_m_style_file_mixes_formats_inside_a_fused_layer(tmp_path):
    from agentrt.models.weights import ConcatLinear

    def q4_k_m(name: str):  # llama.cpp's Q4_K_M keeps attn_v, ffn_down and output in Q6_K
        return qtype("Q6_K" if name.split(".")[-2] in ("attn_v", "ffn_down", "output")
                     else "Q4_K")

    model = check_against_transformers("llama", q4_k_m, tmp_path)
    assert isinstance(model.layers[0].qkv, ConcatLinear)  # Q+K in Q4_K, V in Q6_K
    assert [p.qtype.name for p in model.layers[0].qkv.parts] == ["Q4_K", "Q6_K"]


def test_formats_the_kernels_do_not_run_are_refused_naming_the_tensor(tmp_path):
    hf, arch, name = build("llama", **KQUANT_SIZED)

    def iq4_nl(tensor: str):
        return qtype("IQ4_NL" if tensor == "blk.1.ffn_up.weight" else "Q8_0")

    path = write_gguf(hf, tmp_path / "iq.gguf", arch, name, iq4_nl, tokenizer=tiny_tokenizer)
    with pytest.raises(ValueError, match=r"'blk\.1\.ffn_up\.weight'.*IQ4_NL.*Q4_K"):
        Engine(str(path), quantization="gguf")
    assert not (tmp_path / "cache" / "models").exists()  # refused before anything was written


def test_resident_memory_after_loading_stays_near_the_file_size(tmp_path):
    cfg = types.SimpleNamespace(
        hidden_size=1024, intermediate_size=4096, num_hidden_layers=10, num_attention_heads=16,
        num_key_value_heads=4, max_position_embeddings=512, vocab_size=512, rope_theta=1e4,
        rms_norm_eps=1e-5)

    def formats(name: str):  # Q4_K gate/up, Q8_0 the rest
        return qtype("Q4_K" if ".ffn_gate" in name or ".ffn_up" in name else "Q8_0")

    path = write_random_llama(tmp_path / "big.gguf", cfg, formats)
    size = path.stat().st_size
    assert size >= 100 * 2**20
    script = f"""
import json, resource
from pathlib import Path
import torch
from agentrt.models import load_model
from agentrt.models.files import gguf_folder
from agentrt_kernels.cpu.gguf_linear import _kernel
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
_kernel()
gguf_folder(Path({str(path)!r}))  # config + tokenizer written once, as any first run does
before = rss()
loaded = load_model({str(path)!r}, quantization="gguf", fused_ops=True)
out = loaded.model.layers[0].gate_up(torch.ones(1, 1024))
print(json.dumps(dict(growth=rss() - before, finite=bool(out.isfinite().all()))))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["finite"]
    assert result["growth"] <= 1.5 * size, (result["growth"] / size, done.stderr[-2000:])


def test_random_blocks_have_finite_values():
    import gguf
    import numpy as np

    for name in ("Q4_K", "Q5_K", "Q6_K", "Q8_0"):
        raw = random_blocks(3, 256, qtype(name), np.random.default_rng(0))
        values = gguf.quants.dequantize(raw, qtype(name))
        assert values.shape == (3, 256) and np.isfinite(values).all()
        assert 0.01 < np.abs(values).max() < 1.0


def test_the_default_model_runs_its_q4_1_layers_and_gives_float32_greedy_outputs(
        engine, exact_engine):
    """The default engine runs the file's Q4_1 blocks on the path the auto rule gives (the
    exact one until the integer kernels are batch-invariant); on the exact path those blocks
    give the float32 model's greedy outputs (Q4_1 is lossless for this model)."""
    from agentrt.models.gguf_weights import AUTO_INT8_FORMATS
    from agentrt_kernels.cpu.gguf_linear import GGUFLinear

    assert engine.config.resolved_quantization == "gguf"  # the shared engine: the default
    layer = engine.core.model.layers[0]
    assert isinstance(layer.gate_up, GGUFLinear) and layer.gate_up.qtype.name == "Q4_1"
    assert layer.gate_up.activations == ("int8" if "Q4_1" in AUTO_INT8_FORMATS else "float32")
    assert exact_engine.core.model.layers[0].gate_up.activations == "float32"
    float32 = Engine(quantization="none", profile_on_start=False, kv_cache_gb=0.25)
    prompts = ["The capital of France is", "def fibonacci(n):",
               "Write a haiku about the sea.", "1, 2, 3, 4,", "Tell me about"]
    try:
        for prompt in prompts:
            params = SamplingParams(max_tokens=24, ignore_eos=True)
            assert exact_engine.generate(prompt, params).token_ids == \
                float32.generate(prompt, params).token_ids, prompt
    finally:
        float32.close()


def run_int8(path, monkeypatch, *, twin: bool):
    """Greedy tokens and logprobs of ``gguf_activations="int8"``: every block-format linear on
    the integer path's C++ kernel, or (``twin``) its torch reference ``q8(h) @ W.T``."""
    from agentrt_kernels.cpu import gguf_linear

    with monkeypatch.context() as patch:
        if twin:
            patch.setattr(gguf_linear, "_kernel", lambda: None)
        out, model = run(path, activations="int8")
    assert model.layers[0].o_proj.activations == "int8"
    assert (model.layers[0].o_proj._kernel is None) == twin
    return out


def test_int8_activations_give_the_integer_twins_greedy_tokens(tmp_path, monkeypatch):
    """The four formats of the issue's files (Q4_1, Q8_0; Q4_K_M = Q4_K + Q6_K) in one model."""
    hf, arch, name = build("llama", **KQUANT_SIZED)
    kinds = {"attn_q": "Q4_1", "attn_k": "Q4_1", "attn_v": "Q6_K", "attn_output": "Q8_0",
             "ffn_gate": "Q4_K", "ffn_up": "Q4_K", "ffn_down": "Q6_K"}

    def formats(tensor: str):
        return qtype(kinds.get(tensor.split(".")[-2], "Q8_0"))

    path = write_gguf(hf, tmp_path / "mixed.gguf", arch, name, formats, sync=True,
                      tokenizer=tiny_tokenizer)
    got = run_int8(path, monkeypatch, twin=False)
    want = run_int8(path, monkeypatch, twin=True)
    assert got.token_ids == want.token_ids
    # NOTE: a float32 summation-order difference upstream can move an activation across a
    # rounding boundary of its 8-bit grid (one step: max|x| / 127), so the kernel and its twin
    # agree to ~3e-3 in logprob here, ten times closer than the float32 path is to either
    gap = [abs(got.logprobs[s][t] - want.logprobs[s][t]) for s, t in enumerate(want.token_ids)]
    exact, _ = run(path)  # float32 activations: the same tokens, not the same numbers
    assert exact.token_ids == want.token_ids
    drift = [abs(exact.logprobs[s][t] - want.logprobs[s][t]) for s, t in enumerate(exact.token_ids)]
    assert max(gap) < 1e-2 < max(drift) < 0.1


def _llama3_tokens(writer, gguf) -> None:
    """tiny_tokenizer's vocabulary with Llama 3.1's end-of-turn and end-of-message tokens, which
    llama.cpp's converter names in no metadata key."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    tokens = [*bytes_to_unicode().values(), "Ġt", "<|eom_id|>", "<|eot_id|>",
              *(f"<extra_{i}>" for i in range(252)), "<|end_of_text|>"]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([1] * 257 + [3] * 2 + [4] * 252 + [3])
    writer.add_token_merges(["Ġ t"])
    writer.add_bos_token_id(511)
    writer.add_eos_token_id(511)


def test_a_llama3_file_stops_at_the_end_of_a_turn_and_of_a_tool_call_message(tmp_path):
    """``<|eot_id|>`` and ``<|eom_id|>`` (a message that called a tool, Llama 3.1) end
    generation as llama.cpp ends it, though the file names only eos."""
    hf, arch, name = build("llama", **KQUANT_SIZED)
    path = write_gguf(hf, tmp_path / "llama3.gguf", arch, name, qtype("Q8_0"),
                      tokenizer=_llama3_tokens)
    from agentrt.models.gguf_file import GGUFFile

    assert GGUFFile(path).config["eos_token_id"] == [257, 258, 511]
