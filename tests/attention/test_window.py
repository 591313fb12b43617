"""Sliding-window attention: every backend equals a naive masked attention over the pages.

A layer with window W lets the query at position p see keys p - W + 1 .. p (transformers'
``sliding_window``). Each backend is planned for two layers, one global and one sliding, on
random paged batches (decode rows, prefill chunks after cached context, shared prefixes), and
each layer is checked against :func:`ref_paged_attention` (itself checked against a dense
masked softmax here).
"""

from __future__ import annotations

import random

import pytest
import torch

from agentrt.attention import get_attention_backend
from agentrt.attention.torch_ref import ref_paged_attention

H, KVH, D, PAGE, PAGES, W = 4, 2, 16, 4, 64, 6


def test_the_reference_is_a_naive_masked_attention(make_batch, make_cache, make_qkv):
    meta = make_batch(random.Random(1), [(9, None)], PAGE, PAGES)
    kv = make_cache(PAGES, PAGE, KVH, D)
    q, _, _ = make_qkv(meta, H, KVH, D)
    n = int(meta.kv_lens()[0])
    pages = meta.kv_indices.long()
    k = kv.k[0][pages].flatten(0, 1)[:n].repeat_interleave(H // KVH, 1)  # (L, H, D)
    v = kv.v[0][pages].flatten(0, 1)[:n].repeat_interleave(H // KVH, 1)
    naive = torch.empty_like(q)
    for row in range(q.shape[0]):
        p = n - q.shape[0] + row
        keys = range(max(0, p - W + 1), p + 1)
        w = torch.einsum("hd,lhd->hl", q[row], k[list(keys)]) * D**-0.5
        naive[row] = torch.einsum("hl,lhd->hd", w.softmax(-1), v[list(keys)])
    torch.testing.assert_close(ref_paged_attention(q, kv.k[0], kv.v[0], meta, window=W), naive,
                               atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["torch", "cpu", "torch_cascade", "flashinfer_cascade"])
def test_sliding_and_global_layers_equal_the_reference(name, make_batch, make_cache, make_qkv):
    rng = random.Random(0)
    torch.manual_seed(0)
    cls = get_attention_backend(name)
    options = dict(impl="reference") if name.startswith("flashinfer") else {}
    for specs in ([(1, None), (1, None), (7, None), (1, None), (5, None)],
                  [(1, "a"), (1, "a"), (3, "a"), (1, None)],  # a shared prefix: cascade
                  [(1, None)] * 3):
        meta = make_batch(rng, specs, PAGE, PAGES)
        kv = make_cache(PAGES, PAGE, KVH, D, layers=2)
        q, k, v = make_qkv(meta, H, KVH, D)
        backend = cls(kv, H, D, windows=(None, W), scale=0.3, **options)
        backend.plan(meta)
        for layer, window in enumerate((None, W)):
            out = backend.forward(layer, q, k, v)
            ref = ref_paged_attention(q, kv.k[layer], kv.v[layer], meta, scale=0.3,
                                      window=window)
            torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)


def test_flashinfer_plans_window_left_and_the_scale(make_batch):
    from agentrt.attention.cascade import PagedLevel
    from agentrt_kernels.paged import HeadLayout, flashinfer_plan_args

    meta = make_batch(random.Random(2), [(1, None), (4, None)], PAGE, PAGES)
    heads = HeadLayout(H, KVH, D, torch.float16, scale=0.25)
    args = flashinfer_plan_args(PagedLevel.from_metadata(meta), heads, window=W)
    for call in (args.prefill_call(), args.decode_call()):
        assert call.kwargs["window_left"] == W - 1 and call.kwargs["sm_scale"] == 0.25
    assert flashinfer_plan_args(meta, heads).decode_call().kwargs["window_left"] == -1
