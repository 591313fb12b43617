"""The GGUF block-format kernels against the gguf package's own dequantization.

Blocks come from ``gguf.quants.quantize`` where the installed gguf implements it (Q4_0, Q4_1,
Q5_0, Q5_1, Q8_0, BF16), else they are random bytes with finite f16 scales set explicitly
(the k-quants: every bit pattern of their values and 6-bit scales is a valid block).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize as gguf_dequantize
from gguf.quants import quantize as gguf_quantize

from agentrt_kernels.cpu import gguf_linear
from agentrt_kernels.cpu.gguf_linear import (
    INT8_FORMATS,
    SUPPORTED,
    GGUFLinear,
    bytes_per_row,
    dequantize,
    dequantize_rows,
    ref_gguf_linear,
)

QUANTIZED_BY_GGUF = (T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.BF16)
SCALE_OFFSETS = {T.Q4_K: (0, 2), T.Q5_K: (0, 2), T.Q6_K: (208,)}  # f16 d (and dmin)
# (out_features, in_features) per format: in_features not a multiple of 256 where allowed
SHAPES = {T.F32: [(40, 37)], T.F16: [(40, 37), (24, 64)], T.BF16: [(40, 37)],
          **{t: [(40, 96), (24, 160)] for t in (T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0)},
          **{t: [(40, 256), (24, 768)] for t in (T.Q4_K, T.Q5_K, T.Q6_K)}}
CASES = [(t, s) for t, shapes in SHAPES.items() for s in shapes]


def _name(case: object) -> str:
    return case.name if isinstance(case, T) else "x".join(map(str, case))


def random_blocks(qtype: T, shape: tuple[int, int], seed: int = 0) -> torch.Tensor:
    """Valid GGUF bytes of ``qtype`` for an (out, in) weight, as a 1-D uint8 tensor."""
    rng = np.random.default_rng(seed)
    n, k = shape
    if qtype in QUANTIZED_BY_GGUF:
        raw = gguf_quantize(rng.standard_normal((n, k)).astype(np.float32), qtype)
    elif qtype in (T.F16, T.F32):
        dtype = np.float16 if qtype == T.F16 else np.float32
        raw = rng.standard_normal((n, k)).astype(dtype).view(np.uint8)
    else:
        block, size = GGML_QUANT_SIZES[qtype]
        raw = rng.integers(0, 256, (n * k // block, size), dtype=np.uint8)
        for at in SCALE_OFFSETS[qtype]:
            scale = rng.uniform(1e-3, 2e-2, len(raw)).astype(np.float16)
            raw[:, at:at + 2] = scale.view(np.uint8).reshape(-1, 2)
    return torch.from_numpy(np.ascontiguousarray(raw).reshape(-1))


def _reference_weight(raw: torch.Tensor, qtype: T, shape: tuple[int, int]) -> torch.Tensor:
    rows = raw.numpy().reshape(shape[0], -1)
    return torch.from_numpy(np.ascontiguousarray(gguf_dequantize(rows, qtype)))


def _isas() -> list[int]:
    """The kernel's vector widths this CPU runs: AVX2 always, AVX-512 where it has it."""
    layer = GGUFLinear(random_blocks(T.Q8_0, (8, 32)), T.Q8_0, (8, 32))
    assert layer.isa, "the AVX2 kernel did not build on this machine"
    return sorted({256, layer.isa})


def _close(got: torch.Tensor, want: torch.Tensor) -> None:
    """Equal up to float32 summation order."""
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * float(want.abs().max()))


def test_supported_formats_are_the_issue_list():
    assert {t.name for t in SUPPORTED} == {"F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
                                           "Q8_0", "Q4_K", "Q5_K", "Q6_K"}
    assert set(SHAPES) == set(SUPPORTED)


@pytest.mark.parametrize(("qtype", "shape"), CASES, ids=_name)
def test_dequantize_is_exactly_ggufs(qtype, shape):
    raw = random_blocks(qtype, shape)
    want = _reference_weight(raw, qtype, shape)
    assert torch.equal(dequantize(raw, qtype, shape), want)
    rows = torch.tensor([[3, 0], [shape[0] - 1, 3]])
    assert torch.equal(dequantize_rows(raw, qtype, shape, rows), want[rows])
    layer = GGUFLinear(raw, qtype, shape)
    for isa in _isas():
        layer.isa = isa
        assert torch.equal(layer.dequantized(), want), f"isa {isa}"


@pytest.mark.parametrize("isa", _isas())
@pytest.mark.parametrize("rows", [1, 3, 8, 40])
@pytest.mark.parametrize(("qtype", "shape"), CASES, ids=_name)
def test_linear_equals_its_reference(qtype, shape, rows, isa):
    raw = random_blocks(qtype, shape, seed=rows)
    gen = torch.Generator().manual_seed(rows)
    bias = torch.randn(shape[0], generator=gen)
    layer = GGUFLinear(raw, qtype, shape, bias)
    layer.isa = isa
    h = torch.randn(rows, shape[1], generator=gen)
    _close(layer(h), ref_gguf_linear(raw, qtype, shape, h, bias))


def test_prefill_runs_in_tiles_and_matches(monkeypatch):
    """A batch past MAX_KERNEL_ROWS dequantizes a few weight rows at a time into a GEMM."""
    shape = (50, 512)
    raw = random_blocks(T.Q4_K, shape)
    monkeypatch.setattr(gguf_linear, "TILE_BYTES", 7 * 4 * shape[1])  # 8 tiles, the last short
    calls = []
    real = gguf_linear._dequantize
    monkeypatch.setattr(gguf_linear, "_dequantize",
                        lambda *args: calls.append(args[5]) or real(*args))
    h = torch.randn(gguf_linear.MAX_KERNEL_ROWS + 1, shape[1])
    _close(GGUFLinear(raw, T.Q4_K, shape)(h), ref_gguf_linear(raw, T.Q4_K, shape, h))
    assert calls == [7] * 7 + [1]


def test_layer_keeps_the_files_bytes_without_a_copy():
    raw = random_blocks(T.Q6_K, (16, 512)).reshape(16, -1)
    layer = GGUFLinear(raw, T.Q6_K, (16, 512))
    assert layer.raw.data_ptr() == raw.data_ptr()
    assert layer.nbytes == raw.numel() == 16 * bytes_per_row(T.Q6_K, 512)
    tensors = [v for v in vars(layer).values() if isinstance(v, torch.Tensor)]
    assert sum(t.numel() * t.element_size() for t in tensors) == raw.numel()


def test_bytes_per_row():
    assert bytes_per_row(T.Q4_K, 4096) == 16 * 144
    assert bytes_per_row(T.Q8_0, 96) == 3 * 34
    assert bytes_per_row(T.BF16, 37) == 74


@pytest.mark.parametrize("qtype", [T.IQ2_XXS, T.Q2_K, T.Q3_K, T.TQ1_0])
def test_unsupported_formats_raise_naming_the_format(qtype):
    with pytest.raises(ValueError, match=f"{qtype.name} is not supported.*Q4_K.*Q6_K"):
        GGUFLinear(torch.zeros(256, dtype=torch.uint8), qtype, (1, 256))
    with pytest.raises(ValueError, match=qtype.name):
        bytes_per_row(qtype, 256)


def test_bad_inputs_raise_clear_errors():
    raw = random_blocks(T.Q8_0, (4, 64))
    with pytest.raises(ValueError, match="do not hold a Q8_0 weight"):
        GGUFLinear(raw[:-1], T.Q8_0, (4, 64))
    with pytest.raises(ValueError, match="multiple of its block of 256"):
        GGUFLinear(raw, T.Q4_K, (4, 100))
    with pytest.raises(ValueError, match="uint8"):
        GGUFLinear(raw.to(torch.int16), T.Q8_0, (4, 64))
    with pytest.raises(ValueError, match=r"expected \(T, 64\)"):
        GGUFLinear(raw, T.Q8_0, (4, 64))(torch.zeros(2, 32))
    with pytest.raises(IndexError, match=r"\[0, 4\)"):
        dequantize_rows(raw, T.Q8_0, (4, 64), torch.tensor([4]))


# 19 blocks of 32: two groups of 8 and an odd tail for the AVX-512 kernels; 17 rows: odd, and
# past the k-quants' batch-1 passes of 4 weight rows
INT8_CASES = [(t, s) for t, s in CASES if t in INT8_FORMATS] + [
    (t, (17, 608)) for t in (T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0)] + [
    (t, (17, 512)) for t in (T.Q4_K, T.Q5_K, T.Q6_K)] + [
    # 17 blocks a row: batched k-quant passes run chunks of 8 blocks (8 rows) or 16 (4 rows)
    # over tiles of 4 weight rows, adding partial sums
    (t, (9, 17 * 256)) for t in (T.Q4_K, T.Q5_K, T.Q6_K)]


@pytest.mark.parametrize(("qtype", "shape"), INT8_CASES, ids=_name)
def test_int8_activations_are_ggmls_blocks(qtype, shape):
    """The C++ activation quantizer equals the torch twin bit for bit, and stays within half
    a grid step of the float activations."""
    gen = torch.Generator().manual_seed(0)
    h = torch.randn(5, shape[1], generator=gen) * torch.logspace(-3, 2, shape[1])
    h[1] = 0  # an all-zero block has scale 0
    want = gguf_linear.ref_int8_activations(h, qtype)
    got = torch.empty_like(h)
    kernel = gguf_linear._int8_kernel()
    assert kernel is not None, "the integer kernel did not build on this machine"
    kernel.activations(int(qtype), h.data_ptr(), 5, shape[1], got.data_ptr())
    assert torch.equal(got, want)
    size = 256 if qtype in (T.Q4_K, T.Q5_K, T.Q6_K) else 32
    step = h.reshape(5, -1, size).abs().amax(-1, keepdim=True) / 127
    # Q8_0 keeps its scale as f16 (11 bits, fewer below 6e-5): |q| <= 127 times that error
    slack = 127 * (step.half().float() - step).abs() if size == 32 else 0
    assert ((want - h).reshape(5, -1, size).abs() <= step * 0.5001 + slack + 1e-12).all()


@pytest.mark.parametrize("isa", _isas())
@pytest.mark.parametrize("rows", [1, 2, 3, 5, 8, 9, 13, 40])  # remainders of 8 activation rows
@pytest.mark.parametrize(("qtype", "shape"), INT8_CASES, ids=_name)
def test_int8_linear_equals_its_reference(qtype, shape, rows, isa):
    raw = random_blocks(qtype, shape, seed=rows)
    gen = torch.Generator().manual_seed(rows)
    bias = torch.randn(shape[0], generator=gen)
    layer = GGUFLinear(raw, qtype, shape, bias, activations="int8")
    if isa > layer.isa:
        pytest.skip(f"the integer kernel runs at {layer.isa} here")
    layer.isa = isa
    h = torch.randn(rows, shape[1], generator=gen)
    got = layer(h)
    _close(got, ref_gguf_linear(raw, qtype, shape, h, bias, activations="int8"))
    exact = ref_gguf_linear(raw, qtype, shape, h, bias)
    assert not torch.equal(got, exact)  # the activations really were quantized
    torch.testing.assert_close(got, exact, rtol=0, atol=0.05 * float(exact.abs().max()))


def test_int8_leaves_float_formats_in_float32_and_covers_prefill():
    raw = random_blocks(T.F16, (8, 64))
    h = torch.randn(2, 64)
    layer = GGUFLinear(raw, T.F16, (8, 64), activations="int8")
    _close(layer(h), ref_gguf_linear(raw, T.F16, (8, 64), h))
    raw = random_blocks(T.Q6_K, (8, 256))
    h = torch.randn(gguf_linear.MAX_KERNEL_ROWS + 9, 256)  # prefill: still llama.cpp's numbers
    _close(GGUFLinear(raw, T.Q6_K, (8, 256), activations="int8")(h),
           ref_gguf_linear(raw, T.Q6_K, (8, 256), h, activations="int8"))
    with pytest.raises(ValueError, match="activations='int4'"):
        GGUFLinear(raw, T.Q8_0, (8, 64), activations="int4")
