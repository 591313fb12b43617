"""Continuous batching: concurrent requests give what each gives alone."""

from __future__ import annotations

from agentrt import SamplingParams

QUESTIONS = [
    "What is the capital of France?",
    "Name three primary colors.",
    "Write one sentence about dogs.",
    "What is 2 plus 2?",
    "Give me a synonym for happy.",
    "What is the boiling point of water?",
    "Translate 'hello' to Spanish.",
    "Who wrote Romeo and Juliet?",
]


def test_batch_of_8_equals_each_alone(exact_engine, chat):
    """On the exact path a row's numbers do not depend on its batch. NOTE: the default's
    integer path (llama.cpp's) is not batch-invariant: its batched int8 kernels sum a row's
    blocks in another order than at batch 1 (~5e-7 apart), which can flip a near-tie."""
    engine = exact_engine
    prompts = [chat(q) for q in QUESTIONS]
    params = SamplingParams(max_tokens=16)
    alone = [engine.generate(p, params, namespace=f"alone-{i}").token_ids
             for i, p in enumerate(prompts)]
    together = [o.token_ids for o in engine.generate(prompts, params, namespace="together")]
    assert together == alone
    assert len({tuple(t) for t in alone}) == len(alone)  # really 8 different requests
