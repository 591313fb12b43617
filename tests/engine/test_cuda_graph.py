"""Decode steps through CUDA graphs' fixed buffers: padding, and equality with eager decode.

On CPU the graph path runs eagerly (``DecodeGraphs(capture=False)``) over FlashInfer's
reference twins: the padding, the fixed page-table buffers and the copies into the graph's
inputs are exactly those a captured graph reads. The ``gpu`` test captures real graphs.
"""

from __future__ import annotations

import random
import warnings
from types import SimpleNamespace

import pytest
import torch

from agentrt import SamplingParams
from agentrt.attention.base import AttentionMetadata
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


def _shared_prefix_decode(num_seqs: int, shared: int) -> AttentionMetadata:
    """``num_seqs`` decode rows on the same ``shared`` prefix pages plus one own page each."""
    i32 = torch.int32
    indices = [p for s in range(num_seqs) for p in [*range(shared), shared + s]]
    last = [1 + s % PAGE for s in range(num_seqs)]
    slots = [(shared + s) * PAGE + last[s] - 1 for s in range(num_seqs)]
    return AttentionMetadata(
        torch.arange(num_seqs + 1, dtype=i32), torch.arange(num_seqs + 1, dtype=i32) * (shared + 1),
        torch.tensor(indices, dtype=i32), torch.tensor(last, dtype=i32),
        torch.tensor(slots, dtype=torch.int64), PAGE)


def test_a_step_sharing_prefix_pages_fits_the_graph_table(make_cache, make_qkv):
    """8 requests on 12 shared pages reference 104 pages of a 24-page pool: the table of a
    graph of B rows holds B * max_pages_per_seq, so the step runs (it raised ValueError)."""
    pages, shared = 24, 12
    meta = _shared_prefix_decode(8, shared)
    assert meta.kv_indices.numel() > pages + 3  # the old bound: num_pages + len(sizes)
    kv = make_cache(pages, PAGE, KVH, D)
    q, k, v = make_qkv(meta, H, KVH, D)
    want = ref_paged_attention(q, *_written(kv, meta, k, v), meta)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the reference-twin fallback
        backend = FlashInferBackend(kv, H, D, impl="reference")
    graphs = DecodeGraphs(_FakeModel(), backend, (1, 4, 8), pad_page=pages - 1,
                          max_pages_per_seq=shared + 1, device=torch.device("cpu"),
                          capture=False)
    assert graphs.padded_size(meta) == 8
    backend.plan_decode_graph(meta)
    torch.testing.assert_close(backend.forward(0, q, k, v), want, atol=1e-5, rtol=1e-5)


def test_a_step_over_the_graph_table_runs_eagerly(make_cache):
    kv = make_cache(24, PAGE, KVH, D)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        backend = FlashInferBackend(kv, H, D, impl="reference")
    graphs = DecodeGraphs(_FakeModel(), backend, (1, 4, 8), pad_page=23, max_pages_per_seq=4,
                          device=torch.device("cpu"), capture=False)
    assert graphs.padded_size(_shared_prefix_decode(3, 3)) == 4  # 12 + 1 pad page <= 4 * 4
    assert graphs.padded_size(_shared_prefix_decode(3, 4)) == 4  # 15 + 1 <= 16
    assert graphs.padded_size(_shared_prefix_decode(3, 5)) is None  # 18 + 1 > 16: eager
    assert graphs.padded_size(_shared_prefix_decode(8, 3)) == 8  # 32 <= 8 * 4


class _FakeModel:
    """What DecodeGraphs reads of a model before a step runs (no step runs here)."""

    config = SimpleNamespace(hidden_size=8)
    dtype = torch.float32


def _written(kv, meta, k, v) -> tuple[torch.Tensor, torch.Tensor]:
    k_pages, v_pages = kv.k[0].clone(), kv.v[0].clone()
    k_pages.flatten(0, 1)[meta.slot_mapping] = k
    v_pages.flatten(0, 1)[meta.slot_mapping] = v
    return k_pages, v_pages


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
