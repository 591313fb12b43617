"""The torch backend computes attention from exactly FlashInfer-style paged metadata."""

from __future__ import annotations

import random

import torch

from agentrt.attention import KVCacheTensors
from agentrt.attention.torch_ref import TorchRefBackend, ref_paged_attention

H, KVH, D, PAGE, PAGES = 4, 2, 16, 4, 40


def test_backend_equals_reference_over_the_metadata(make_batch, make_cache, make_qkv):
    rng = random.Random(0)
    torch.manual_seed(0)
    for _ in range(5):
        meta = make_batch(rng, [(q, None) for q in (1, 1, 7, 1, 5)], PAGE, PAGES)
        kv = make_cache(PAGES, PAGE, KVH, D)
        q, k, v = make_qkv(meta, H, KVH, D)
        backend = TorchRefBackend(kv, H, D)
        backend.plan(meta)
        out = backend.forward(0, q, k, v)
        # the backend appended k/v at slot_mapping; the reference reads the pages as they are now
        ref = ref_paged_attention(q, kv.k[0], kv.v[0], meta)
        torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
        assert torch.equal(kv.k[0].reshape(-1, KVH, D)[meta.slot_mapping], k)


def test_copy_pages_roundtrip():
    dev = KVCacheTensors.allocate(2, 8, PAGE, KVH, D, torch.float32)
    host = KVCacheTensors.allocate(2, 4, PAGE, KVH, D, torch.float32)
    dev.k.normal_()
    dev.v.normal_()
    before_k, before_v = dev.k[:, [5, 2]].clone(), dev.v[:, [5, 2]].clone()
    dev.copy_pages(host, [5, 2], [0, 3])
    dev.k.zero_()
    dev.v.zero_()
    host.copy_pages(dev, [0, 3], [1, 7])
    assert torch.equal(dev.k[:, [1, 7]], before_k) and torch.equal(dev.v[:, [1, 7]], before_v)
