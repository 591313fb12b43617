"""agentrt's fused decode ops (RMSNorm, residual add + RMSNorm, RoPE in place, SwiGLU's
silu * up, paged decode attention) against their torch references, and an engine running them
against the plain float engine."""

from __future__ import annotations

import random

import pytest
import torch

from agentrt import Engine, EngineConfig, SamplingParams
from agentrt.attention.torch_ref import TorchRefBackend, ref_paged_attention
from agentrt_kernels.cpu import decode_ops
from agentrt_kernels.cpu.attention import CpuDecodeBackend

H, KVH, D = 9, 3, 64  # the default model's heads: three query heads per KV head
MIXED = [(1, None), (7, None), (1, None), (5, None), (1, None), (16, None)]
DECODE = [(1, None)] * 6


def test_the_kernels_build_here():
    assert decode_ops.kernels_available(), "decode_ops.cpp did not build on this machine"


def test_rms_norm_equals_the_reference():
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(7, 576, generator=gen) * 3, torch.randn(576, generator=gen)
    torch.testing.assert_close(decode_ops.rms_norm(x, w, 1e-5),
                               decode_ops.ref_rms_norm(x, w, 1e-5), rtol=1e-6, atol=1e-6)


def test_add_rms_norm_adds_in_place_and_normalises_the_sum():
    gen = torch.Generator().manual_seed(2)
    x, a = torch.randn(6, 576, generator=gen), torch.randn(6, 576, generator=gen) * 5
    w = torch.randn(576, generator=gen)
    want_x, want_h = decode_ops.ref_add_rms_norm(x.clone(), a, w, 1e-5)
    got_x, got_h = decode_ops.add_rms_norm_(x, a, w, 1e-5)
    assert got_x.data_ptr() == x.data_ptr() and torch.equal(got_x, want_x)  # the add is exact
    torch.testing.assert_close(got_h, want_h, rtol=1e-6, atol=1e-6)


def test_silu_mul_equals_the_reference_over_the_whole_range():
    gen = torch.Generator().manual_seed(3)
    gate_up = torch.randn(5, 2 * 1536, generator=gen) * 6
    gate_up[0, :8] = torch.tensor([0.0, -0.0, 1e-30, -1e-30, 80.0, -80.0, 100.0, -100.0])
    torch.testing.assert_close(decode_ops.silu_mul(gate_up), decode_ops.ref_silu_mul(gate_up),
                               rtol=5e-7, atol=1e-30)  # a few float32 ulps


def test_rope_rotates_a_strided_view_in_place_bit_for_bit():
    gen = torch.Generator().manual_seed(1)
    qkv = torch.randn(5, H * D + 2 * KVH * D, generator=gen)
    cos, sin = torch.randn(5, 1, D, generator=gen), torch.randn(5, 1, D, generator=gen)
    q, rest = qkv[:, : H * D].view(5, H, D), qkv[:, H * D :].clone()
    want = decode_ops.ref_apply_rope(q.clone(), cos, sin)
    got = decode_ops.apply_rope_(q, cos, sin)
    assert got.data_ptr() == q.data_ptr() and torch.equal(got, want)
    assert torch.equal(qkv[:, H * D :], rest)  # k and v untouched


@pytest.mark.parametrize("specs", [MIXED, DECODE])
def test_decode_attention_equals_the_reference_over_the_same_metadata(
        make_batch, make_cache, make_qkv, specs, monkeypatch):
    def no_fallback(*args):
        raise AssertionError("the kernel declined and torch ran instead")
    monkeypatch.setattr(TorchRefBackend, "_attend_decode", no_fallback)
    rng = random.Random(3)
    torch.manual_seed(3)
    for _ in range(4):
        meta = make_batch(rng, specs)
        kv = make_cache(128, 4, KVH, D)
        q, k, v = make_qkv(meta, H, KVH, D)
        backend = CpuDecodeBackend(kv, H, D)
        backend.plan(meta)
        out = backend.forward(0, q, k, v)  # appends k/v, then attends
        want = ref_paged_attention(q, kv.k[0], kv.v[0], meta)
        torch.testing.assert_close(out, want, atol=2e-5, rtol=2e-5)


def test_quantized_engines_use_the_fused_ops_unless_told_not_to():
    assert EngineConfig(quantization="int4").resolved_attention_backend == "cpu"
    assert EngineConfig(quantization="int4", fused_ops=False).resolved_attention_backend == "torch"
    assert EngineConfig(quantization="none").resolved_attention_backend == "torch"
    assert EngineConfig(quantization="none", fused_ops=True).resolved_attention_backend == "cpu"
    assert EngineConfig(quantization="int8", attention_backend="torch_cascade"
                        ).resolved_attention_backend == "torch_cascade"


def test_fused_float_engine_keeps_the_float_engines_greedy_outputs(engine, chat):
    fused = Engine(quantization="none", fused_ops=True, profile_on_start=False,
                   kv_cache_gb=0.25)
    try:
        assert fused.core.config.resolved_attention_backend == "cpu"
        prompts = [chat(p) for p in ("Name three colours.", "What is 12 times 12?",
                                     "Write a haiku about the sea.")]
        params = SamplingParams(max_tokens=24)
        want = [o.token_ids for o in engine.generate(prompts, params)]
        assert [o.token_ids for o in fused.generate(prompts, params)] == want  # batched
        assert fused.generate(prompts[0], params).token_ids == want[0]  # alone
    finally:
        fused.close()


@pytest.mark.parametrize("lens", [[1, 127, 128, 129, 300, 700], [200], [100]],
                         ids=["batch", "one-two-chunks", "one-chunk"])
@pytest.mark.parametrize(("heads", "kv_heads", "head_dim"),
                         [(9, 3, 64), (8, 1, 128), (4, 2, 96), (6, 6, 40), (16, 2, 24)])
def test_decode_attention_over_long_contexts_merges_its_chunks(heads, kv_heads, head_dim, lens):
    """Sequences past one chunk of keys (128) are attended chunk by chunk and merged; shorter
    ones in the same batch in one piece; a task takes all kv heads or (a short batch) one.
    Against softmax(q K^T) V over the same slots."""
    gen = torch.Generator().manual_seed(heads * head_dim)
    max_len, num_slots = max(lens), 2048
    k_slots = torch.randn(num_slots, kv_heads, head_dim, generator=gen)
    v_slots = torch.randn(num_slots, kv_heads, head_dim, generator=gen)
    k_slots[5, 0] *= 40  # one dominant key: the merge must weigh the chunks by their maxima
    table = torch.zeros(len(lens), max_len, dtype=torch.int64)
    for b, n in enumerate(lens):
        table[b, :n] = torch.randperm(num_slots, generator=gen)[:n]
    table[len(lens) // 2, min(lens) // 2] = 5
    rows = torch.randperm(len(lens), generator=gen)  # each sequence's query row, out of order
    q = torch.randn(len(lens), heads, head_dim, generator=gen)
    out = torch.full_like(q, float("nan"))
    scale = head_dim ** -0.5
    assert decode_ops.decode_attention(q, k_slots, v_slots, table.reshape(-1),
                                       torch.tensor(lens), rows, max_len, scale, out)
    group = heads // kv_heads
    for b, n in enumerate(lens):
        k = k_slots[table[b, :n]].repeat_interleave(group, dim=1)  # (n, heads, D)
        v = v_slots[table[b, :n]].repeat_interleave(group, dim=1)
        weights = torch.softmax(torch.einsum("hd,nhd->hn", q[rows[b]], k) * scale, dim=-1)
        want = torch.einsum("hn,nhd->hd", weights, v)
        torch.testing.assert_close(out[rows[b]], want, atol=2e-5, rtol=2e-5)
