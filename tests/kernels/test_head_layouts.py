"""The head layouts of real model families (query heads / KV heads / head size), on every path.

FlashInfer's CUDA-core decode kernels dispatch GQA group sizes 1, 2, 3, 4 and 8 only; the
backend runs the others (Qwen2.5's 7 and 6, Qwen3-14B's 5) on tensor cores. On CPU: that
choice, and the torch backend, the FlashInfer backend's reference twins and the graph path's
fixed buffers over these layouts against a naive per-head attention. On a GPU (marked ``gpu``):
FlashInfer's own kernels, eager and graph decode, and an engine start-up per layout.
"""

from __future__ import annotations

import importlib.util
import random
import warnings

import pytest
import torch

from agentrt.attention import KVCacheTensors
from agentrt.attention.base import AttentionMetadata
from agentrt.attention.torch_ref import TorchRefBackend
from agentrt.engine.cuda_graph import pad_decode_metadata
from agentrt_kernels.flashinfer_backend import FlashInferBackend
from agentrt_kernels.paged import CUDA_CORE_DECODE_GROUP_SIZES, HeadLayout

LAYOUTS = [(9, 3, 64), (14, 2, 64), (12, 2, 128), (28, 4, 128), (32, 8, 128), (16, 8, 128),
           (40, 8, 128)]
"""SmolLM2-135M, Qwen2.5-0.5B, Qwen2.5-1.5B, Qwen2.5-7B, Llama-3-8B, Qwen3-1.7B, Qwen3-14B."""
IDS = [f"{h}q{kvh}kv{d}" for h, kvh, d in LAYOUTS]
PAGE, PAGES = 16, 64
MIXED = [(1, None), (9, None), (1, "a"), (5, "a"), (1, None)]
DECODE = [(1, None), (1, "a"), (1, "a")]

needs_flashinfer = pytest.mark.skipif(
    not torch.cuda.is_available() or importlib.util.find_spec("flashinfer") is None,
    reason="needs a CUDA GPU and flashinfer (pip install 'agentrt[gpu]')")


def naive_attention(q: torch.Tensor, cache: tuple[torch.Tensor, torch.Tensor],
                    meta: AttentionMetadata) -> torch.Tensor:
    """Query head ``h`` attends to KV head ``h // group``, one sequence and head at a time."""
    k_pages, v_pages = (c.double() for c in cache)
    heads, kv_heads = q.shape[1], k_pages.shape[2]
    out = torch.zeros(q.shape, dtype=torch.float64)
    kv_lens, qo = meta.kv_lens().tolist(), meta.qo_indptr.tolist()
    for s, n in enumerate(kv_lens):
        pages = meta.kv_indices[meta.kv_indptr[s] : meta.kv_indptr[s + 1]].long()
        k, v = k_pages[pages].flatten(0, 1)[:n], v_pages[pages].flatten(0, 1)[:n]
        rows = q[qo[s] : qo[s + 1]].double()  # (R, H, D)
        pos = torch.arange(n - rows.shape[0], n)[:, None]  # causal: up to its own position
        hidden = torch.arange(n)[None, :] > pos
        for h in range(heads):
            kh = h // (heads // kv_heads)
            scores = (rows[:, h] @ k[:, kh].T * q.shape[2] ** -0.5).masked_fill(hidden, -1e300)
            out[qo[s] : qo[s + 1], h] = torch.softmax(scores, -1) @ v[:, kh]
    return out.float()


def _step(build_batch, layout, specs, seed: int, device: str = "cpu", dtype=torch.float32):
    h, kvh, d = layout
    meta = build_batch(random.Random(seed), specs, page_size=PAGE, num_pages=PAGES - 1)
    torch.manual_seed(seed)
    kv = KVCacheTensors.allocate(1, PAGES, PAGE, kvh, d, dtype, device)
    kv.k.normal_()
    kv.v.normal_()
    t = int(meta.qo_indptr[-1])
    q, k, v = (torch.randn(t, n, d, dtype=dtype, device=device) for n in (h, kvh, kvh))
    return meta, kv, q, k, v


def _written(kv: KVCacheTensors, meta: AttentionMetadata, k, v) -> tuple[torch.Tensor, ...]:
    """The layer-0 cache with the step's new K/V at their slots (what attention must read)."""
    k_pages, v_pages = kv.k[0].clone(), kv.v[0].clone()
    k_pages.flatten(0, 1)[meta.slot_mapping] = k
    v_pages.flatten(0, 1)[meta.slot_mapping] = v
    return k_pages, v_pages


@pytest.mark.parametrize("layout", LAYOUTS, ids=IDS)
def test_decode_runs_on_tensor_cores_exactly_where_cuda_cores_cannot(layout):
    h, kvh, d = layout
    heads = HeadLayout(h, kvh, d, torch.bfloat16)
    assert heads.group_size == h // kvh
    assert heads.decode_uses_tensor_cores == (h // kvh not in CUDA_CORE_DECODE_GROUP_SIZES)


def test_the_failing_families_get_tensor_cores():
    uses = {(h, kvh): HeadLayout(h, kvh, 128, torch.bfloat16).decode_uses_tensor_cores
            for h, kvh, _ in LAYOUTS}
    assert uses[14, 2] and uses[12, 2] and uses[28, 4] and uses[40, 8]
    assert not (uses[9, 3] or uses[32, 8] or uses[16, 8])
    with pytest.raises(ValueError, match="num_kv_heads"):
        HeadLayout(14, 4, 64, torch.bfloat16)


@pytest.mark.parametrize("layout", LAYOUTS, ids=IDS)
@pytest.mark.parametrize("backend_name", ["torch", "flashinfer_reference"])
def test_backends_equal_naive_attention(make_batch, layout, backend_name):
    h, _, d = layout
    meta, kv, q, k, v = _step(make_batch, layout, MIXED, seed=sum(layout))
    want = naive_attention(q, _written(kv, meta, k, v), meta)
    if backend_name == "torch":
        backend = TorchRefBackend(kv, h, d)
    else:
        backend = FlashInferBackend(kv, h, d, impl="reference")
    backend.plan(meta)
    torch.testing.assert_close(backend.forward(0, q, k, v), want, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("layout", LAYOUTS, ids=IDS)
def test_graph_buffers_equal_naive_attention(make_batch, layout):
    h, _, d = layout
    meta, kv, q, k, v = _step(make_batch, layout, DECODE, seed=sum(layout))
    want = naive_attention(q, _written(kv, meta, k, v), meta)
    backend = FlashInferBackend(kv, h, d, impl="reference")
    backend.enable_decode_graphs((4,), max_pages_per_seq=8)
    padded = pad_decode_metadata(meta, 4, pad_page=PAGES - 1)
    backend.plan_decode_graph(padded)
    pad = (torch.zeros(1, *t.shape[1:]) for t in (q, k, v))
    out = backend.forward(0, *(torch.cat([t, p]) for t, p in zip((q, k, v), pad, strict=True)))
    torch.testing.assert_close(out[:3], want, atol=1e-4, rtol=1e-4)


# --- GPU ------------------------------------------------------------------------------------
@pytest.mark.gpu
@needs_flashinfer
@pytest.mark.parametrize("layout", LAYOUTS, ids=IDS)
@pytest.mark.parametrize("specs", [MIXED, DECODE], ids=["mixed", "decode"])
def test_flashinfer_kernels_equal_naive_attention(make_batch, layout, specs):
    h, _, d = layout
    meta, kv, q, k, v = _step(make_batch, layout, specs, sum(layout), "cuda", torch.bfloat16)
    backend = FlashInferBackend(kv, h, d, impl="flashinfer")
    backend.plan(meta)
    out = backend.forward(0, q, k, v).float().cpu()
    cpu_kv = tuple(t.float().cpu() for t in _written(kv, meta, k, v))
    want = naive_attention(q.float().cpu(), cpu_kv, meta)
    torch.testing.assert_close(out, want, atol=2e-2, rtol=2e-2)


@pytest.mark.gpu
@needs_flashinfer
@pytest.mark.parametrize("layout", LAYOUTS, ids=IDS)
def test_engine_starts_and_decodes_on_cuda(layout, tmp_path):
    """A random 2-layer Qwen2 of this layout: start-up (warm-up, graph capture) and greedy
    decoding equal the torch backend's first token."""
    import transformers

    from agentrt import EngineConfig, SamplingParams
    from agentrt.engine.llm_engine import LLMEngine

    h, kvh, d = layout
    torch.manual_seed(0)
    config = transformers.Qwen2Config(
        hidden_size=h * d, intermediate_size=256, num_hidden_layers=2, num_attention_heads=h,
        num_key_value_heads=kvh, head_dim=d, max_position_embeddings=512, vocab_size=512)
    transformers.Qwen2ForCausalLM(config).to(torch.bfloat16).save_pretrained(tmp_path)
    _save_byte_tokenizer(tmp_path)
    outputs = {}
    for backend in ("flashinfer", "torch"):
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # no silent reference fallback
            core = LLMEngine(EngineConfig(model=str(tmp_path), device="cuda", dtype="bfloat16",
                                          attention_backend=backend, num_blocks=64,
                                          max_num_seqs=4, profile_on_start=False))
        reqs = [core.add_request(list(range(3 + i, 40 + i)), SamplingParams(
            max_tokens=6, ignore_eos=True)) for i in range(3)]
        while core.has_unfinished():
            core.step()
        outputs[backend] = [r.output_token_ids for r in reqs]
        assert all(len(o) == 6 for o in outputs[backend])
    assert [o[0] for o in outputs["flashinfer"]] == [o[0] for o in outputs["torch"]]


def _save_byte_tokenizer(folder) -> None:
    """A tiny word-level tokenizer over 512 ids (the engine needs one; the test feeds ids)."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocab = {f"t{i}": i for i in range(512)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="t0"))
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="t1").save_pretrained(folder)
