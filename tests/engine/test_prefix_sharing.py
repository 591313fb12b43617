"""Prefix sharing through the radix cache, and identical outputs under forced eviction."""

from __future__ import annotations

from agentrt import Engine, SamplingParams


def _ids(tokenizer, text: str, n: int) -> list[int]:
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert len(ids) >= n
    return ids[:n]


def test_second_request_prefills_only_its_suffix(engine, tokenizer, long_text):
    shared = _ids(tokenizer, long_text, 300)
    suffix = tokenizer.encode("\nQuestion: what is this text about?\nAnswer:",
                              add_special_tokens=False)
    params = SamplingParams(max_tokens=4)
    first = engine.generate(shared, params, namespace="prefix-test")
    assert first.num_cached_tokens == 0 and first.num_prefill_tokens == 300
    second = engine.generate(shared + suffix, params, namespace="prefix-test")
    page = engine.config.block_size
    reused = 300 // page * page
    assert second.num_cached_tokens == reused
    assert second.num_prefill_tokens == 300 + len(suffix) - reused


def test_outputs_identical_when_pool_forces_eviction(exact_engine, tokenizer, long_text):
    """On the exact path (batch-invariant: the integer path's batched and batch-1 kernels sum
    in different orders, so its near-ties can follow the batch)."""
    engine = exact_engine
    words = long_text.split()
    base = [" ".join(words[i * 7 : i * 7 + 120]) for i in range(6)]
    # each extension right after its base (its prefix is still cached when it arrives)
    prompts = [base[0], base[0] + " In short,", base[1], base[1] + " Therefore", *base[2:]]
    params = SamplingParams(max_tokens=12)
    expected = [o.token_ids for o in engine.generate(prompts, params, namespace="evict-ref")]
    small = Engine(dtype="float32", num_blocks=24, block_size=16, max_num_seqs=4,
                   gguf_activations="float32")
    try:
        got = [small.generate(p, params).token_ids for p in prompts]  # one by one: reuse
        got_batch = [o.token_ids for o in small.generate(prompts, params)]  # contention
    finally:
        small.close()
    assert got == expected
    assert got_batch == expected
    assert small.stats.num_cached_tokens > 0  # sharing happened ...
    assert small.core.kv.cache.num_evicted_blocks > 0  # ... in a pool that had to evict
