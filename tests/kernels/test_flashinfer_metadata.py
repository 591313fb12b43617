"""The arguments agentrt builds for FlashInfer's wrappers, checked on CPU.

Each test feeds exactly those arguments (plan args, append indices, cascade levels) to the
``ref_*`` torch twins and compares with the torch backend or with full attention.
"""

from __future__ import annotations

import importlib.util
import random
import subprocess
import sys

import pytest
import torch

from agentrt import SamplingParams
from agentrt.attention import AttentionMetadata, KVCacheTensors, get_attention_backend
from agentrt.attention.cascade import split_cascade
from agentrt.attention.torch_ref import TorchRefBackend, ref_paged_attention
from agentrt_kernels.cascade import cascade_plan_args, ref_cascade_attention
from agentrt_kernels.flashinfer_backend import FlashInferBackend, FlashInferCascadeBackend
from agentrt_kernels.paged import (
    HeadLayout,
    append_indices,
    flashinfer_plan_args,
    ref_append_paged_kv_cache,
    ref_batch_prefill,
)

H, KVH, D, PAGES = 6, 2, 16, 128  # GQA: three query heads per KV head
HEADS = HeadLayout(H, KVH, D, torch.float32)
MIXED = [(1, None), (7, None), (1, None), (5, None), (1, None), (16, None)]
DECODE = [(1, None)] * 5
SHARED = [(1, "a"), (5, None), (1, "a"), (7, "a"), (1, None), (1, "b"), (3, "b"), (1, "b")]


def _clone(kv: KVCacheTensors) -> KVCacheTensors:
    return KVCacheTensors(kv.k.clone(), kv.v.clone())


@pytest.mark.parametrize("specs", [MIXED, DECODE, SHARED])
def test_append_indices_address_the_slot_mapping(make_batch, specs, make_cache, make_qkv):
    rng = random.Random(0)
    for _ in range(5):
        meta = make_batch(rng, specs)
        idx = append_indices(meta)
        b, pos = idx.batch_indices.long(), idx.positions.long()
        pages = meta.kv_indices.long()[meta.kv_indptr.long()[b] + pos // meta.page_size]
        assert torch.equal(pages * meta.page_size + pos % meta.page_size, meta.slot_mapping)
        kv, ref = make_cache(PAGES, 4, KVH, D), make_cache(PAGES, 4, KVH, D)
        ref.k.copy_(kv.k)
        ref.v.copy_(kv.v)
        _, k, v = make_qkv(meta, H, KVH, D)
        k_slots, v_slots = kv.layer_slots(0)
        k_slots.index_copy_(0, meta.slot_mapping, k)  # what the torch backend does
        v_slots.index_copy_(0, meta.slot_mapping, v)
        ref_append_paged_kv_cache(k, v, idx.batch_indices, idx.positions, (ref.k[0], ref.v[0]),
                                  meta.kv_indices, meta.kv_indptr, meta.kv_last_page_len)
        assert torch.equal(ref.k, kv.k) and torch.equal(ref.v, kv.v)


@pytest.mark.parametrize("specs", [MIXED, DECODE])
def test_plan_args_through_the_reference_equal_the_torch_backend(make_batch, make_cache, make_qkv,
                                                                 specs):
    rng = random.Random(1)
    torch.manual_seed(1)
    for _ in range(5):
        meta = make_batch(rng, specs)
        kv = make_cache(PAGES, 4, KVH, D)
        q, k, v = make_qkv(meta, H, KVH, D)
        backend = TorchRefBackend(kv, H, D)
        backend.plan(meta)
        out = backend.forward(0, q, k, v)  # appends k/v, then attends
        plan = flashinfer_plan_args(meta, HEADS)
        ref = ref_batch_prefill(q, (kv.k[0], kv.v[0]), plan)
        torch.testing.assert_close(ref.out, out, atol=1e-5, rtol=1e-5)
        assert plan.is_decode == (specs is DECODE)


def test_plan_calls_carry_the_metadata(make_batch):
    meta = make_batch(random.Random(2), MIXED)
    call = flashinfer_plan_args(meta, HEADS).prefill_call()
    for got, want in zip(call.args[:4], (meta.qo_indptr, meta.kv_indptr, meta.kv_indices,
                                          meta.kv_last_page_len), strict=True):
        assert torch.equal(got, want) and got.dtype == torch.int32
    assert call.args[4:] == (H, KVH, D, meta.page_size)
    assert call.kwargs == dict(causal=True, sm_scale=D**-0.5, window_left=-1,
                               q_data_type=torch.float32, kv_data_type=torch.float32)
    decode = flashinfer_plan_args(make_batch(random.Random(2), DECODE), HEADS).decode_call()
    assert len(decode.args) == 7 and decode.args[3:] == (H, KVH, D, 4)


def test_cascade_levels_equal_full_attention(make_batch, make_cache, make_qkv):
    rng = random.Random(3)
    torch.manual_seed(3)
    for _ in range(10):
        meta = make_batch(rng, SHARED)
        kv = make_cache(PAGES, 4, KVH, D)
        q = make_qkv(meta, H, KVH, D)[0]
        split = split_cascade(meta)
        assert split is not None and split.num_groups == 2
        plan = cascade_plan_args(split, HEADS)
        order = split.row_order if split.row_order is not None else torch.arange(q.shape[0])
        got = ref_cascade_attention(q[order], (kv.k[0], kv.v[0]), plan)
        want = ref_paged_attention(q, kv.k[0], kv.v[0], meta)[order]
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_cascade_levels_layout(make_batch):
    meta = make_batch(random.Random(4), SHARED)
    split = split_cascade(meta)
    shared, unique = split.levels
    t = int(meta.qo_indptr[-1])
    assert int(shared.qo_indptr[-1]) == int(unique.qo_indptr[-1]) == t
    assert sorted(split.row_order.tolist()) == list(range(t))  # group "a" is not adjacent
    assert not shared.causal and unique.causal
    n_shared = (shared.kv_indptr[1:] - shared.kv_indptr[:-1]).tolist()
    assert sum(n > 0 for n in n_shared) == 2  # one entry per group, the rest empty
    for n, last in zip(n_shared, shared.kv_last_page_len.tolist(), strict=True):
        assert last == (meta.page_size if n else 0)
    # a request's pages = its group's shared pages (stored once) + its level-1 pages
    qo0, qo1 = shared.qo_indptr.tolist(), unique.qo_indptr.tolist()
    members = [sum(qo0[g] <= r < qo0[g + 1] for r in qo1[:-1]) for g in range(len(n_shared))]
    per_request = sum(n * m for n, m in zip(n_shared, members, strict=True))
    assert meta.kv_indices.numel() == unique.kv_indices.numel() + per_request
    call = cascade_plan_args(split, HEADS).plan_call()
    assert [len(a) for a in call.args[:4]] == [2, 2, 2, 2]
    assert call.args[4:] == (H, KVH, D, 4) and call.kwargs["causal"] is True


def test_shared_pages_stop_before_the_query_tokens():
    # both start on pages 7, 8, 9; the first one's 6 new tokens begin inside page 8
    i32 = torch.int32
    meta = AttentionMetadata(
        qo_indptr=torch.tensor([0, 6, 7], dtype=i32), kv_indptr=torch.tensor([0, 3, 6], dtype=i32),
        kv_indices=torch.tensor([7, 8, 9, 7, 8, 9], dtype=i32),
        kv_last_page_len=torch.tensor([2, 2], dtype=i32),
        slot_mapping=torch.arange(6), page_size=4)
    split = split_cascade(meta)
    assert split.shared.kv_indices.tolist() == [7]  # 10 - 6 = 4 tokens of context: one page
    assert split.unique.kv_indices.tolist() == [8, 9, 8, 9]
    assert split_cascade(meta, min_shared_pages=2) is None


def test_no_shared_pages_no_split(make_batch):
    assert split_cascade(make_batch(random.Random(5), MIXED)) is None
    assert split_cascade(make_batch(random.Random(5), [(1, "a"), (4, None)])) is None


@pytest.mark.parametrize("cls", [FlashInferBackend, FlashInferCascadeBackend])
@pytest.mark.parametrize("specs", [MIXED, DECODE, SHARED])
def test_backend_on_reference_kernels_equals_torch_backend(make_batch, make_cache, make_qkv, cls,
                                                           specs):
    rng = random.Random(6)
    torch.manual_seed(6)
    num_cascade_steps = 0
    for _ in range(3):
        meta = make_batch(rng, specs)
        kv = make_cache(PAGES, 4, KVH, D, layers=2)
        kv_fi = _clone(kv)
        torch_backend, fi = TorchRefBackend(kv, H, D), cls(kv_fi, H, D, impl="reference")
        torch_backend.plan(meta)
        fi.plan(meta)
        for layer in range(2):
            q, k, v = make_qkv(meta, H, KVH, D)
            want = torch_backend.forward(layer, q, k, v)
            torch.testing.assert_close(fi.forward(layer, q, k, v), want, atol=1e-5, rtol=1e-5)
        assert torch.equal(kv_fi.k, kv.k) and torch.equal(kv_fi.v, kv.v)
        num_cascade_steps += fi.num_cascade_steps
    assert num_cascade_steps == (3 if cls is FlashInferCascadeBackend and specs is SHARED
                                    else 0)


@pytest.mark.skipif(importlib.util.find_spec("flashinfer") is not None,
                    reason="flashinfer is installed")
def test_flashinfer_impl_without_flashinfer_says_how_to_install(make_cache):
    with pytest.raises(ImportError, match=r"pip install 'agentrt\[gpu\]'"):
        FlashInferBackend(make_cache(PAGES, 4, KVH, D), H, D, impl="flashinfer")


def test_auto_impl_on_a_cpu_cache_falls_back_to_the_reference(make_cache):
    with pytest.warns(RuntimeWarning, match="the KV cache is on cpu.*torch reference kernels"):
        backend = get_attention_backend("flashinfer")(make_cache(PAGES, 4, KVH, D), H, D)
    assert type(backend.kernels).__name__ == "_ReferenceKernels"


def test_engine_on_the_reference_kernels_matches_the_torch_engine(engine, chat, long_text):
    """Real engine metadata → FlashInfer plan args → reference kernels: same greedy tokens."""
    from agentrt import Engine

    system = long_text[:1200]
    prompts = [chat(q, system=system) for q in ("What is JSON?", "Name a container.")]
    params = SamplingParams(max_tokens=8)
    with pytest.warns(RuntimeWarning):
        fi = Engine(dtype="float32", attention_backend="flashinfer_cascade", num_blocks=256,
                    profile_on_start=False)
    try:
        got = [fi.generate(prompts[0], params).token_ids,
               *(o.token_ids for o in fi.generate(prompts, params))]
    finally:
        fi.close()
    want = [engine.generate(prompts[0], params, namespace="fi-ref").token_ids,
            *(o.token_ids for o in engine.generate(prompts, params, namespace="fi-ref"))]
    assert got == want
    assert fi.core.backend.num_cascade_steps > 0


_NO_GPU_IMPORTS = """
import sys

GPU = ("flashinfer", "triton", "agentrt_kernels.flashinfer_backend")
import agentrt
print([m for m in GPU if m in sys.modules])
# NOTE: transformers (the tokenizer) pulls in torch._dynamo, which imports triton when it is
# installed; block both GPU libraries to show nothing of agentrt's needs them
sys.modules["triton"] = sys.modules["flashinfer"] = None
eng = agentrt.Engine(dtype="float32", num_blocks=64, profile_on_start=False)
eng.generate("Hi", agentrt.SamplingParams(max_tokens=2))
eng.close()
print([m for m in GPU if sys.modules.get(m) is not None])
agentrt.attention.get_attention_backend("flashinfer")  # resolving the class imports no GPU library
print([m for m in GPU if sys.modules.get(m) is not None])
"""


def test_cpu_engine_never_imports_gpu_code():
    run = subprocess.run([sys.executable, "-c", _NO_GPU_IMPORTS], capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    imported, engine_built, resolved = run.stdout.strip().splitlines()[-3:]
    assert imported == engine_built == "[]"
    assert resolved == "['agentrt_kernels.flashinfer_backend']"
