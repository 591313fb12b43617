"""The CPU quantized linear kernels against their torch reference, and on the real model."""

from __future__ import annotations

import glob

import pytest
import torch

from agentrt import Engine, EngineConfig, SamplingParams
from agentrt.models import resolve_model
from agentrt.models.linear import get_linear
from agentrt_kernels.cpu import Q4Linear, Q8Linear, dequantize, quantize, ref_quant_linear

PROMPTS = ["What is the capital of France?", "Write a haiku about the sea.",
           "List three prime numbers.", "Who wrote Hamlet?"]


def test_isa_cannot_be_set_to_a_width_the_cpu_lacks():
    layer = Q8Linear(torch.zeros(8, 32))
    with pytest.raises(ValueError, match="isa=1024"):
        layer.isa = 1024


def _isas() -> list[int]:
    """The kernel's vector widths this CPU runs: AVX2 always, AVX-512 where it has it."""
    layer = Q8Linear(torch.zeros(8, 32))
    return sorted({256, layer.isa} - {0})


@pytest.mark.parametrize("isa", _isas())
@pytest.mark.parametrize("cls", [Q8Linear, Q4Linear])
@pytest.mark.parametrize("rows", [1, 3, 4, 5, 8, 9, 17, 32, 33])
def test_kernel_equals_its_reference(cls, rows, isa):
    gen = torch.Generator().manual_seed(rows)
    weight, bias = torch.randn(200, 96, generator=gen), torch.randn(200, generator=gen)
    layer = cls(weight, bias)
    assert layer._kernel is not None, "the AVX2 kernel did not build on this machine"
    layer.isa = isa
    h = torch.randn(rows, 96, generator=gen)
    torch.testing.assert_close(layer(h), ref_quant_linear(h, layer.weight, layer.bias),
                               rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("cls", [Q8Linear, Q4Linear])
def test_kernel_dequantization_is_exactly_the_reference(cls):
    """Prefill-sized batches run a GEMM on the kernel's dequantized weight: bit-equal to
    the torch reference, so prefill keeps the float model's numbers."""
    layer = cls(torch.randn(160, 128, generator=torch.Generator().manual_seed(7)))
    assert layer._kernel is not None, "the AVX2 kernel did not build on this machine"
    assert torch.equal(layer.dequantized(), dequantize(layer.weight))


@pytest.mark.parametrize("bits", [4, 8])
def test_quantization_error_is_bounded_by_the_grid(bits):
    weight = torch.randn(64, 128)
    q = quantize(weight, bits)
    step = q.d.repeat_interleave(32, dim=1)  # one grid step per weight
    assert ((dequantize(q) - weight).abs() <= step / 2 + 1e-6).all()
    assert q.q.numel() == weight.numel() // (2 if bits == 4 else 1)


@pytest.fixture(scope="module")
def gguf_weights(engine):
    from safetensors.torch import load_file

    weights = {}
    for path in glob.glob(str(resolve_model(None) / "*.safetensors")):
        weights.update(load_file(path))
    return weights


def test_gguf_forms_are_recovered_exactly(gguf_weights):
    """The default model's layers are Q4_1 and its embeddings Q8_0 in the GGUF it ships in."""
    layer = gguf_weights["model.layers.3.mlp.down_proj.weight"].float()
    embed = gguf_weights["model.embed_tokens.weight"].float()
    assert torch.equal(dequantize(quantize(layer, 4)), layer)
    assert torch.equal(dequantize(quantize(embed, 8)), embed)
    assert not torch.equal(dequantize(quantize(layer, 8)), layer)  # 8-bit is not Q4_1's grid


def test_int4_engine_matches_the_float_engine_greedy(engine):
    quantized = Engine(quantization="int4", profile_on_start=False, kv_cache_gb=0.25)
    try:
        prompts = [engine.tokenizer.apply_chat_template(
            [{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False)
            for p in PROMPTS]
        params = SamplingParams(max_tokens=24)
        want = [o.token_ids for o in engine.generate(prompts, params)]
        got = [o.token_ids for o in quantized.generate(prompts, params)]
        assert got == want
        one = quantized.generate(prompts[0], params)  # batch 1 (a GEMV) as well
        assert one.token_ids == want[0]
    finally:
        quantized.close()


def test_bad_quantization_settings_raise_clear_errors():
    with pytest.raises(ValueError, match="unknown quantization"):
        EngineConfig(quantization="int3")
    with pytest.raises(ValueError, match="float32"):
        get_linear("int4", torch.bfloat16)
    with pytest.raises(ValueError, match="multiple of the group size"):
        Q8Linear(torch.randn(8, 40))
