"""Semantic functions on both backends (``backend``: local engine, SGLang client of a real
``agentrt serve``): the same DAG gives the hand-run greedy outputs on each, and the stats say
what each backend prefilled."""

from __future__ import annotations

import itertools
import sys
import threading
import time
from pathlib import Path

from agentrt import SamplingParams
from agentrt.semantic import Perf, SemanticError, SemanticSession, semantic_function

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))
from serve_harness import held_blocks  # noqa: E402

_ns = itertools.count()


def ref(engine, prompt: str, max_tokens: int) -> str:
    """A fresh greedy call on the in-process engine, in a namespace of its own."""
    params = SamplingParams(max_tokens=max_tokens)
    return engine.generate(prompt, params, namespace=f"semantic-twin-{next(_ns)}").text


@semantic_function(max_tokens=8)
def combine(a, b):
    """Combine these notes into one sentence.
    1. {{input:a}}
    2. {{input:b}}
    Sentence:{{output:final}}"""


def test_two_function_pipeline_with_a_shared_prefix(backend, engine, long_text, tokenizer):
    instruction = "Follow this style guide when you summarize.\n" + " ".join(
        long_text.split()[:120])

    def summarize(chunk):
        pass
    summarize.__doc__ = instruction + "\n\nText: {{input:chunk}}\nSummary:{{output:summary}}"
    mapper = semantic_function(max_tokens=8)(summarize)
    chunks = ["The cat sat on the mat all day.", "Rain fell over the quiet harbour town."]

    with SemanticSession(backend, namespace=f"semantic-twin-{next(_ns)}") as s:
        parts = [mapper(c) for c in chunks]
        final = combine(*parts)
        got = final.get(perf=Perf.LATENCY), [p.get() for p in parts]

    expected = [ref(engine, f"{instruction}\n\nText: {c}\nSummary:", 8).strip() for c in chunks]
    reduce_prompt = ("Combine these notes into one sentence.\n"
                     f"1. {expected[0]}\n2. {expected[1]}\nSentence:")
    assert got == (ref(engine, reduce_prompt, 8).strip(), expected)

    stats = s.stats
    print(f"\n{backend.name}: {stats}")
    shared = len(tokenizer.encode(instruction, add_special_tokens=False)) - 1
    assert stats.backend == backend.name and stats.num_requests == 3
    assert stats.num_shared_prefix_fills == 1
    # each map call took the filled prefix from the backend's prefix cache
    assert stats.num_cached_tokens >= 2 * shared
    computed = stats.num_prompt_tokens - stats.num_cached_tokens  # by the three calls
    assert 0 < computed < stats.num_prefill_tokens  # + the fill, computed once
    assert stats.num_prefill_tokens < stats.num_prompt_tokens


@semantic_function(max_tokens=8, stop="\n")
def profile(person):
    """Facts about {{input:person}}.
    Born in:{{output:born}}
    Known for:{{output:known}}"""


def test_multi_output_continues_one_backend_session(backend, engine, tokenizer):
    with SemanticSession(backend, share_prefixes=False) as s:
        born, known = profile("Marie Curie")
        got = born.get(), known.get()

    prompt = "Facts about Marie Curie.\nBorn in:"
    params = SamplingParams(max_tokens=8, stop="\n")
    first = engine.generate(prompt, params, namespace=f"semantic-twin-{next(_ns)}").text
    second = engine.generate(prompt + first + "\nKnown for:", params,
                             namespace=f"semantic-twin-{next(_ns)}").text
    assert got == (first.strip(), second.strip())

    stats = s.stats
    print(f"\n{backend.name}: {stats}")
    first_len = len(tokenizer.encode(prompt, add_special_tokens=False))
    assert stats.backend == backend.name and stats.num_requests == 1
    # the second output's call reused the session's context: at least the first prompt
    assert stats.num_cached_tokens >= first_len
    assert stats.num_prefill_tokens == stats.num_prompt_tokens - stats.num_cached_tokens


@semantic_function(max_tokens=24, ignore_eos=True)
def ramble(topic):
    """Tell a long story about {{input:topic}}.{{output:start}} And then{{output:rest}}"""


def test_closing_mid_flight_frees_what_the_backend_holds(backend, engine, request):
    server = request.getfixturevalue("sglang_server") if backend.name == "sglang" else None

    def running() -> bool:
        if server is None:
            return engine.load().num_running > 0
        return server.metrics()["agentrt_num_requests_running"] > 0

    errors: list[BaseException] = []
    with SemanticSession(backend):
        outputs = [v for topic in ("a dragon", "a ship") for v in ramble(topic)]

        def fetch() -> None:
            try:
                outputs[-1].get()
            except SemanticError as exc:
                errors.append(exc)
        waiter = threading.Thread(target=fetch)
        waiter.start()
        deadline = time.monotonic() + 60
        while not running() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert running()
    waiter.join(timeout=60)
    assert errors and "closed" in str(errors[0])
    if server is None:
        load = engine.load()
        assert load.num_running == load.num_waiting == 0
        assert load.num_free_blocks + load.num_evictable_blocks == load.num_total_blocks
    else:
        metrics = server.wait_until_idle()
        assert metrics["agentrt_num_requests_running"] == 0 and held_blocks(metrics) == 0
