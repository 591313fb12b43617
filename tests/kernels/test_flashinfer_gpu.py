"""The real FlashInfer wrappers equal the torch references over the same arguments (GPU only).

Skipped without a CUDA GPU and ``flashinfer`` (pip install 'agentrt[gpu]'). Inputs are
float16 on the GPU; references run in float64 on CPU copies of exactly the same tensors.
"""

from __future__ import annotations

import importlib.util
import math
import random

import pytest
import torch

from agentrt.attention import KVCacheTensors
from agentrt.attention.cascade import split_cascade
from agentrt.attention.torch_ref import ref_paged_attention
from agentrt_kernels.cascade import ref_merge_state
from agentrt_kernels.flashinfer_backend import FlashInferBackend, FlashInferCascadeBackend
from agentrt_kernels.paged import HeadLayout, append_indices, flashinfer_plan_args

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available()
                       or importlib.util.find_spec("flashinfer") is None,
                       reason="needs a CUDA GPU and flashinfer (pip install 'agentrt[gpu]')"),
]

H, KVH, D, PAGE, PAGES = 32, 8, 128, 16, 256  # shapes FlashInfer compiles kernels for
DTYPE, TOL = torch.float16, dict(atol=2e-3, rtol=2e-3)
MIXED = [(1, None), (37, None), (1, None), (100, None), (1, None)]
DECODE = [(1, None)] * 6
SHARED = [(1, "a"), (20, None), (1, "a"), (9, "a"), (1, None), (1, "b"), (5, "b")]


def _cache(device: str) -> KVCacheTensors:
    kv = KVCacheTensors.allocate(1, PAGES, PAGE, KVH, D, DTYPE, device)
    kv.k.normal_()
    kv.v.normal_()
    return kv


def _inputs(meta):
    t = int(meta.qo_indptr[-1])
    return [torch.randn(t, n, D, dtype=DTYPE, device="cuda") for n in (H, KVH, KVH)]


@pytest.mark.parametrize("cls", [FlashInferBackend, FlashInferCascadeBackend])
@pytest.mark.parametrize("specs", [MIXED, DECODE, SHARED])
def test_backend_equals_the_reference(make_batch, cls, specs):
    rng = random.Random(0)
    torch.manual_seed(0)
    for _ in range(3):
        meta = make_batch(rng, specs, page_size=PAGE, num_pages=PAGES)
        kv = _cache("cuda")
        kv_ref = KVCacheTensors(kv.k.cpu().float(), kv.v.cpu().float())
        q, k, v = _inputs(meta)
        backend = cls(kv, H, D, impl="flashinfer")
        backend.plan(meta)
        out = backend.forward(0, q, k, v)
        # the reference appends by slot_mapping and attends over the same metadata
        kv_ref.layer_slots(0)[0][meta.slot_mapping] = k.cpu().float()
        kv_ref.layer_slots(0)[1][meta.slot_mapping] = v.cpu().float()
        assert torch.equal(kv.k.cpu().float(), kv_ref.k)  # append_paged_kv_cache
        want = ref_paged_attention(q.cpu().float(), kv_ref.k[0], kv_ref.v[0], meta)
        torch.testing.assert_close(out.cpu().float(), want, **TOL)
    if cls is FlashInferCascadeBackend and specs is SHARED:
        assert backend.num_cascade_steps == 1 and split_cascade(meta) is not None


def test_batch_indices_positions_match_flashinfer(make_batch):
    import flashinfer

    meta = make_batch(random.Random(1), MIXED, page_size=PAGE, num_pages=PAGES)
    ours = append_indices(meta)
    theirs = flashinfer.get_batch_indices_positions(
        meta.qo_indptr.cuda(), meta.kv_lens().cuda(), int(meta.qo_indptr[-1]))
    assert torch.equal(theirs[0].cpu().int(), ours.batch_indices)
    assert torch.equal(theirs[1].cpu().int(), ours.positions)


def test_prefill_lse_is_base_two_of_ours(make_batch):
    """FlashInfer's LSE is log2-based: ``lse_flashinfer * ln 2`` is the natural-log LSE."""
    import flashinfer

    from agentrt_kernels.paged import ref_batch_prefill

    meta = make_batch(random.Random(2), MIXED, page_size=PAGE, num_pages=PAGES)
    kv = _cache("cuda")
    q = _inputs(meta)[0]
    plan = flashinfer_plan_args(meta, HeadLayout(H, KVH, D, DTYPE), "cuda")
    wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(
        torch.empty(128 * 1024 * 1024, dtype=torch.uint8, device="cuda"), "NHD")
    call = plan.prefill_call()
    wrapper.plan(*call.args, **call.kwargs)
    out, lse = wrapper.run(q, (kv.k[0], kv.v[0]), return_lse=True)
    ref = ref_batch_prefill(q.cpu(), (kv.k[0].cpu(), kv.v[0].cpu()),
                            flashinfer_plan_args(meta, plan.heads))
    torch.testing.assert_close(out.cpu().float(), ref.out, **TOL)
    torch.testing.assert_close(lse.cpu() * math.log(2), ref.lse, atol=1e-2, rtol=1e-3)


def test_merge_state_matches_flashinfer():
    import flashinfer

    torch.manual_seed(3)
    v_a, v_b = (torch.randn(64, H, D, dtype=DTYPE, device="cuda") for _ in range(2))
    s_a, s_b = (torch.randn(64, H, device="cuda") for _ in range(2))
    v, s = flashinfer.merge_state(v_a, s_a / math.log(2), v_b, s_b / math.log(2))
    ref_v, ref_s = ref_merge_state(v_a.cpu().float(), s_a.cpu(), v_b.cpu().float(), s_b.cpu())
    torch.testing.assert_close(v.cpu().float(), ref_v, **TOL)
    torch.testing.assert_close(s.cpu() * math.log(2), ref_s, atol=1e-4, rtol=1e-4)
