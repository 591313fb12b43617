"""FlashInfer's CUDA-graph decode path: a captured step, re-planned and replayed on new pages,
equals the torch reference over the same pages (GPU only).

Skipped without a CUDA GPU and ``flashinfer``. The CPU twin of this path (the same fixed
buffers read by the reference kernels) is checked in ``tests/engine/test_cuda_graph.py``.
"""

from __future__ import annotations

import importlib.util
import random

import pytest
import torch

from agentrt.attention import KVCacheTensors
from agentrt.attention.torch_ref import ref_paged_attention
from agentrt.engine.cuda_graph import pad_decode_metadata
from agentrt_kernels.flashinfer_backend import FlashInferBackend

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available()
                       or importlib.util.find_spec("flashinfer") is None,
                       reason="needs a CUDA GPU and flashinfer (pip install 'agentrt[gpu]')"),
]

H, KVH, D, PAGE, PAGES = 32, 8, 128, 16, 256
DTYPE, TOL = torch.float16, dict(atol=2e-3, rtol=2e-3)
BATCH, PAD_PAGE = 8, PAGES - 1


def test_replayed_decode_graph_equals_the_reference(make_batch):
    torch.manual_seed(0)
    kv = KVCacheTensors.allocate(1, PAGES, PAGE, KVH, D, DTYPE, "cuda")
    kv.k.normal_()
    kv.v.normal_()
    backend = FlashInferBackend(kv, H, D, impl="flashinfer")
    backend.enable_decode_graphs((BATCH,), PAGES)
    q, k, v = (torch.zeros(BATCH, n, D, dtype=DTYPE, device="cuda") for n in (H, KVH, KVH))
    rng = random.Random(0)
    first = make_batch(rng, [(1, None)] * 5, page_size=PAGE, num_pages=PAGES - 1)
    backend.plan_decode_graph(pad_decode_metadata(first, BATCH, PAD_PAGE))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        backend.forward(0, q, k, v)  # warm-up
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        out = backend.forward(0, q, k, v)

    for num_seqs in (3, 8, 6):  # other steps, other pages: plan outside, replay
        meta = make_batch(rng, [(1, None)] * num_seqs, page_size=PAGE, num_pages=PAGES - 1)
        backend.plan_decode_graph(pad_decode_metadata(meta, BATCH, PAD_PAGE))
        for t in (q, k, v):
            t.normal_()
        graph.replay()
        torch.cuda.synchronize()
        k_ref, v_ref = kv.k[0].cpu().float(), kv.v[0].cpu().float()
        flat_k = k_ref.flatten(0, 1)
        assert torch.equal(flat_k[meta.slot_mapping], k[:num_seqs].cpu().float())
        want = ref_paged_attention(q[:num_seqs].cpu().float(), k_ref, v_ref, meta)
        torch.testing.assert_close(out[:num_seqs].cpu().float(), want, **TOL)
