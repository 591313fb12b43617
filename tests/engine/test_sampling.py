"""Sampling: seeds reproduce, top-k/top-p restrict, logprobs are returned; swap keeps KV."""

from __future__ import annotations

import torch

from agentrt import SamplingParams
from agentrt.core.request import Request
from agentrt.engine.sampler import sample


def _req(**kw) -> Request:
    return Request("r", [1], SamplingParams(**kw))


def test_seeded_sampling_reproduces_and_top_k_restricts():
    logits = torch.randn(1, 50, generator=torch.Generator().manual_seed(0))
    draws = [sample(logits, [_req(temperature=1.0, seed=7)]).token_ids[0] for _ in range(3)]
    assert len(set(draws)) == 1
    top3 = set(logits[0].topk(3).indices.tolist())
    r = _req(temperature=2.0, top_k=3, seed=1)
    assert {sample(logits, [r]).token_ids[0] for _ in range(40)} <= top3


def test_top_p_keeps_the_head_of_the_distribution():
    logits = torch.tensor([[5.0, 4.0, 0.0, -1.0, -2.0]])
    r = _req(temperature=1.0, top_p=0.5, seed=3)
    assert {sample(logits, [r]).token_ids[0] for _ in range(30)} == {0}


def test_logprobs_and_greedy(engine, chat):
    out = engine.generate(chat("Hi"), SamplingParams(max_tokens=3, logprobs=2))
    assert len(out.logprobs) == len(out.token_ids)
    for tok, lp in zip(out.token_ids, out.logprobs, strict=True):
        assert tok in lp and max(lp.values()) == lp[tok] <= 0.0


def test_seeded_generation_is_reproducible(engine, chat):
    p = SamplingParams(max_tokens=8, temperature=0.9, top_p=0.9, seed=123)
    a = engine.generate(chat("Tell me a word."), p).token_ids
    b = engine.generate(chat("Tell me a word."), p).token_ids
    assert a == b
