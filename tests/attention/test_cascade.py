"""Shared-prefix (cascade) attention equals full attention, on random batches and the model."""

from __future__ import annotations

import random

import pytest
import torch

from agentrt import Engine, SamplingParams
from agentrt.attention import KVCacheTensors, get_attention_backend
from agentrt.attention.cascade import merge_state
from agentrt.attention.torch_cascade import TorchCascadeBackend, attention_with_lse
from agentrt.attention.torch_ref import TorchRefBackend

H, KVH, D, PAGE, PAGES = 6, 2, 16, 4, 96


@pytest.mark.parametrize("groups, q_lens", [
    (["a", "a", "a", "a"], [1, 1, 1, 1]),  # decode steps of one group
    (["a", None, "a", "a", None, "b", "b"], [1, 6, 1, 9, 1, 1, 3]),  # mixed, group a split
    (["a", "b", "a", "b"], [5, 1, 1, 7]),  # interleaved groups, prefill chunks
])
def test_torch_cascade_equals_full_attention(make_batch, make_cache, make_qkv, groups, q_lens):
    rng = random.Random(0)
    torch.manual_seed(0)
    for _ in range(5):
        meta = make_batch(rng, list(zip(q_lens, groups, strict=True)), PAGE, PAGES)
        kv = make_cache(PAGES, PAGE, KVH, D)
        kv_cascade = KVCacheTensors(kv.k.clone(), kv.v.clone())
        q, k, v = make_qkv(meta, H, KVH, D)
        full, cascade = TorchRefBackend(kv, H, D), TorchCascadeBackend(kv_cascade, H, D)
        full.plan(meta)
        cascade.plan(meta)
        torch.testing.assert_close(cascade.forward(0, q, k, v), full.forward(0, q, k, v),
                                   atol=1e-5, rtol=1e-5)
        assert cascade.num_cascade_steps == 1
        assert torch.equal(kv_cascade.k, kv.k) and torch.equal(kv_cascade.v, kv.v)


def test_without_shared_pages_it_is_the_torch_backend(make_batch):
    meta = make_batch(random.Random(1), [(1, None), (4, None), (1, None)], PAGE, PAGES)
    kv = KVCacheTensors.allocate(1, PAGES, PAGE, KVH, D, torch.float32)
    backend = get_attention_backend("torch_cascade")(kv, H, D)
    backend.plan(meta)
    assert backend.num_cascade_steps == 0


def test_merge_state_equals_attention_over_the_union():
    torch.manual_seed(2)
    q = torch.randn(1, 3, H, D)  # (B, Q, H, D)
    k, v = torch.randn(1, 20, KVH, D), torch.randn(1, 20, KVH, D)
    full_out, full_lse = attention_with_lse(q, k, v, None, D**-0.5)
    a = attention_with_lse(q, k[:, :7], v[:, :7], None, D**-0.5)
    b = attention_with_lse(q, k[:, 7:], v[:, 7:], None, D**-0.5)
    out, lse = merge_state(*(x[0] for x in a), *(x[0] for x in b))
    torch.testing.assert_close(out, full_out[0], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(lse, full_lse[0], atol=1e-6, rtol=1e-5)
    empty = torch.full_like(lse, float("-inf"))
    assert torch.equal(merge_state(out, lse, torch.zeros_like(out), empty)[0], out)
    both_empty = merge_state(torch.zeros_like(out), empty, torch.zeros_like(out), empty)
    assert not both_empty[0].isnan().any() and torch.equal(both_empty[1], empty)


@pytest.fixture(scope="module")
def cascade_engine():
    """The model on the cascade path, with the session engine's scheduling settings."""
    eng = Engine(dtype="float32", attention_backend="torch_cascade", num_blocks=512,
                 profile_on_start=False)
    yield eng
    eng.close()


def test_greedy_outputs_unchanged_with_cascade(engine, cascade_engine, chat, long_text):
    system = long_text[:1600]  # ~400 tokens shared by every request
    questions = ["What is JSON?", "Name a container type.", "What does dumps do?",
                 "Summarize the text.", "What is a deque?"]
    prompts = [chat(q, system=system) for q in questions]
    params = SamplingParams(max_tokens=16)

    def run(eng: Engine) -> list[list[int]]:
        # the first request leaves the system prompt's pages in the radix cache; the others
        # then run together on those same pages
        first = eng.generate(prompts[0], params, namespace="cascade").token_ids
        return [first, *(o.token_ids for o in eng.generate(prompts[1:], params,
                                                            namespace="cascade"))]

    assert run(cascade_engine) == run(engine)
    assert cascade_engine.core.backend.num_cascade_steps >= params.max_tokens
