"""Decode steps through CUDA graphs' fixed buffers: padding, and equality with eager decode.

On CPU the graph path runs eagerly (``DecodeGraphs(capture=False)``) over FlashInfer's
reference twins: the padding, the fixed page-table buffers and the copies into the graph's
inputs are exactly those a captured graph reads. The ``gpu`` test captures real graphs.
"""

from __future__ import annotations

import random
import warnings

import pytest
import torch

from agentrt import SamplingParams
from agentrt.attention.torch_ref import ref_paged_attention
from agentrt.config import EngineConfig
from agentrt.engine.cuda_graph import DecodeGraphs, pad_decode_metadata
from agentrt.engine.llm_engine import LLMEngine
from agentrt_kernels.flashinfer_backend import FlashInferBackend

H, KVH, D, PAGE, PAGES = 4, 2, 16, 4, 64
PROMPTS = ["The capital of France is", "def add(a, b):", "1, 2, 3, 4,", "Hello"]


def test_padding_rows_sit_on_the_pad_page(make_batch):
    meta = make_batch(random.Random(0), [(1, None)] * 3, page_size=PAGE, num_pages=PAGES - 1)
    padded = pad_decode_metadata(meta, 8, pad_page=PAGES - 1)
    assert padded.num_seqs == 8 and int(padded.qo_indptr[-1]) == 8
    assert torch.equal(padded.kv_lens()[:3], meta.kv_lens())
    assert padded.kv_lens()[3:].tolist() == [1] * 5
    assert padded.kv_indices[meta.kv_indices.numel():].tolist() == [PAGES - 1] * 5
    assert padded.slot_mapping[3:].tolist() == [(PAGES - 1) * PAGE] * 5
    with pytest.raises(ValueError):
        pad_decode_metadata(meta, 2, pad_page=0)


@pytest.mark.parametrize("num_seqs", [1, 3, 8])
def test_fixed_buffers_attend_like_the_unpadded_step(make_batch, make_cache, make_qkv,
                                                     num_seqs):
    rng = random.Random(num_seqs)
    meta = make_batch(rng, [(1, None)] * num_seqs, page_size=PAGE, num_pages=PAGES - 1)
    kv = make_cache(PAGES, PAGE, KVH, D)
    q, k, v = make_qkv(meta, H, KVH, D)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the reference-twin fallback
        backend = FlashInferBackend(kv, H, D, impl="reference")
    backend.enable_decode_graphs((1, 4, 8), PAGES)
    size = next(b for b in (1, 4, 8) if b >= num_seqs)
    padded = pad_decode_metadata(meta, size, pad_page=PAGES - 1)
    pad = torch.zeros(size - num_seqs, *q.shape[1:])
    pad_kv = torch.zeros(size - num_seqs, *k.shape[1:])
    before = kv.k.clone()
    backend.plan_decode_graph(padded)
    out = backend.forward(0, torch.cat([q, pad]), torch.cat([k, pad_kv]), torch.cat([v, pad_kv]))

    want_k = before[0].flatten(0, 1).clone()
    want_k[meta.slot_mapping] = k
    got_k = kv.k[0].flatten(0, 1)
    real = torch.ones(PAGES * PAGE, dtype=torch.bool)
    real[(PAGES - 1) * PAGE :] = False  # the pad page alone may differ
    assert torch.equal(got_k[real], want_k[real])
    want = ref_paged_attention(q, kv.k[0], kv.v[0], meta)
    torch.testing.assert_close(out[:num_seqs], want, atol=1e-5, rtol=1e-5)


def _greedy(core: LLMEngine) -> list[list[int]]:
    reqs = [core.add_request(p, SamplingParams(max_tokens=12, ignore_eos=True))
            for p in PROMPTS]
    while core.has_unfinished():
        core.step()
    return [r.output_token_ids for r in reqs]


def test_graph_path_decodes_like_eager(tiny_model):
    config = EngineConfig(model=tiny_model, device="cpu", attention_backend="flashinfer",
                          num_blocks=128, block_size=4, max_num_seqs=8,
                          profile_on_start=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        eager, graphed = LLMEngine(config), LLMEngine(config)
    pad_page = graphed.kv.pool.allocate(1)[0]
    graphs = DecodeGraphs(graphed.model, graphed.backend, (1, 2, 4, 8), pad_page,
                          graphed.kv_tensors.num_pages, graphed.device, capture=False)
    graphed.runner.graphs = graphs
    assert _greedy(graphed) == _greedy(eager)
    assert graphs.num_steps >= 11  # every pure decode step went through the fixed buffers


def test_engine_captures_no_graphs_on_cpu(tiny_model):
    core = LLMEngine(EngineConfig(model=tiny_model, device="cpu", num_blocks=32,
                                  profile_on_start=False))
    assert core.runner.graphs is None


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_graph_decode_equals_eager_on_cuda(dtype):
    pytest.importorskip("flashinfer")
    base = dict(device="cuda", dtype=dtype, attention_backend="flashinfer", num_blocks=512,
                max_num_seqs=8)
    graphed = LLMEngine(EngineConfig(**base))
    eager = LLMEngine(EngineConfig(**base, enforce_eager=True))
    assert graphed.runner.graphs is not None and graphed.runner.graphs.is_captured
    assert eager.runner.graphs is None
    before = graphed.runner.graphs.num_steps
    assert _greedy(graphed) == _greedy(eager)
    assert graphed.runner.graphs.num_steps - before >= 11
