"""The torch backend computes attention from exactly FlashInfer-style paged metadata."""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F

from agentrt.attention import KVCacheTensors
from agentrt.attention.torch_ref import TorchRefBackend, ref_paged_attention, sdpa_context

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


def test_cuda_attention_leaves_cudnn_out_and_restores_the_callers_choice():
    """cuDNN's SDPA plans every new KV length (48 ms a decode call on an H200): on CUDA the
    backend attends without it, and touches no other switch."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    assert torch.backends.cuda.cudnn_sdp_enabled()
    with sdpa_context(torch.device("cuda")):
        assert not torch.backends.cuda.cudnn_sdp_enabled()
        assert torch.backends.cuda.flash_sdp_enabled() and torch.backends.cuda.math_sdp_enabled()
    assert torch.backends.cuda.cudnn_sdp_enabled()
    with sdpa_kernel([SDPBackend.MATH]):  # the caller's own choice stays
        with sdpa_context(torch.device("cuda")):
            assert torch.backends.cuda.math_sdp_enabled()
            assert not torch.backends.cuda.flash_sdp_enabled()
    with sdpa_context(torch.device("cpu")):
        assert torch.backends.cuda.cudnn_sdp_enabled()  # CPU: torch's default, untouched


def test_overlapping_threads_put_the_switch_back_once_all_are_out():
    """torch's SDPA switches are per process: two engines' threads inside at once must not
    leave cuDNN off (the second saved "off") or turn it back on under the first."""
    import threading

    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def first():
        with sdpa_context(torch.device("cuda")):
            first_in.set()
            second_in.wait(10)
        first_out.set()

    def second():
        first_in.wait(10)
        with sdpa_context(torch.device("cuda")):
            second_in.set()
            first_out.wait(10)
            seen["inside after the first left"] = torch.backends.cuda.cudnn_sdp_enabled()

    threads = [threading.Thread(target=f) for f in (first, second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert seen == {"inside after the first left": False}
    assert torch.backends.cuda.cudnn_sdp_enabled()


def test_backend_calls_sdpa_inside_its_context(monkeypatch, make_batch, make_cache, make_qkv):
    seen = []
    real = F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        seen.append(torch.backends.cuda.cudnn_sdp_enabled())
        return real(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    monkeypatch.setattr("agentrt.attention.torch_ref.sdpa_context",
                        lambda device: sdpa_context(torch.device("cuda")))
    meta = make_batch(random.Random(3), [(1, None), (6, None), (1, None)], PAGE, PAGES)
    backend = TorchRefBackend(make_cache(PAGES, PAGE, KVH, D), H, D)
    backend.plan(meta)
    backend.forward(0, *make_qkv(meta, H, KVH, D))
    assert seen and not any(seen)  # the decode batch and the prefill chunk, cuDNN off for both


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_decode_with_a_growing_cache_equals_the_reference(make_batch):
    rng = random.Random(4)
    kv = KVCacheTensors.allocate(1, PAGES, PAGE, KVH, D, torch.bfloat16, "cuda")
    backend = TorchRefBackend(kv, H, D)
    for _ in range(6):  # a new KV length every step, as in decode
        meta = make_batch(rng, [(1, None), (1, None)], PAGE, PAGES)
        q, k, v = (torch.randn(2, n, D, dtype=torch.bfloat16, device="cuda")
                   for n in (H, KVH, KVH))
        backend.plan(meta)
        out = backend.forward(0, q, k, v)
        want = ref_paged_attention(q.cpu().float(), kv.k[0].cpu().float(),
                                   kv.v[0].cpu().float(), meta)
        torch.testing.assert_close(out.cpu().float(), want, atol=2e-2, rtol=2e-2)
