"""Semantic functions (Parrot) on the real engine: each DAG gives exactly the hand-run outputs,
objectives are deduced from `get`'s criterion, ready requests share a filled prefix, failures
reach every downstream `get`, and closing a session leaves no KV behind."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

from agentrt import SamplingParams
from agentrt.semantic import (
    LATENCY_BONUS,
    Perf,
    SemanticError,
    SemanticSession,
    SemanticVariable,
    semantic_function,
)

_ns = itertools.count()


def ref(engine, prompt: str, max_tokens: int = 12) -> str:
    """The hand-run output: a fresh greedy call in a namespace of its own."""
    out = engine.generate(prompt, SamplingParams(max_tokens=max_tokens),
                          namespace=f"semantic-ref-{next(_ns)}")
    return out.text


@semantic_function(max_tokens=12)
def capital(country: SemanticVariable):
    """Question: What is the capital of {{input:country}}?
    Answer:{{output:answer}}"""


@semantic_function(max_tokens=12)
def describe(city: SemanticVariable):
    """Write one sentence about the city of {{input:city}}.
    Sentence:{{output:sentence}}"""


def _no_kv_held(engine) -> bool:
    load = engine.load()
    return (load.num_free_blocks + load.num_evictable_blocks == load.num_total_blocks
            and load.num_running == load.num_waiting == 0)


# --- 1. one function ----------------------------------------------------------------------
def test_single_function_equals_a_hand_run(engine):
    with SemanticSession(engine) as s:
        answer = capital(s.variable("country", "France"))
        got = answer.get(perf=Perf.LATENCY)
    assert got == ref(engine, "Question: What is the capital of France?\nAnswer:").strip()
    assert s.stats.num_requests == 1


def test_bare_decorator_and_chat_mode(engine, chat):
    @semantic_function
    def plain(x):
        """Say {{input:x}}:{{output:y}}"""

    @semantic_function(chat=True, max_tokens=10)
    def ask(question):
        """{{input:question}} {{output:answer}}"""

    assert plain.params.max_tokens == 256 and plain.outputs == ["y"]
    with SemanticSession(engine):
        answer = ask("What is 2 + 2?")  # a plain str becomes a constant variable
        got = answer.get()
    assert got == ref(engine, chat("What is 2 + 2? "), max_tokens=10).strip()


# --- 2. a chain ---------------------------------------------------------------------------
def test_chain_equals_two_calls_in_sequence(engine):
    with SemanticSession(engine) as s:
        city = capital("Italy")
        sentence = describe(city)
        got = sentence.get()
        assert city.get() == (first := ref(
            engine, "Question: What is the capital of Italy?\nAnswer:").strip())
    second = ref(engine, f"Write one sentence about the city of {first}.\nSentence:").strip()
    assert got == second
    assert s.objectives() == {"capital#0": "latency", "describe#0": "latency"}
    assert [n.priority for n in s.dag.nodes] == [1 + LATENCY_BONUS, 0 + LATENCY_BONUS]


# --- 3. several outputs on one request: tests/semantic/test_semantic_backends.py ----------


# --- 4. map-reduce with a shared instruction ------------------------------------------------
def _map_reduce(engine, long_text: str, **options):
    instruction = "Follow this style guide when you summarize.\n" + " ".join(
        long_text.split()[:150])

    def summarize(chunk):
        pass

    summarize.__doc__ = instruction + ("\n\nText: {{input:chunk}}\n"
                                       "One-line summary:{{output:summary}}")

    @semantic_function(max_tokens=8)
    def combine(a, b, c):
        """Combine these summaries into one sentence.
        1. {{input:a}}
        2. {{input:b}}
        3. {{input:c}}
        Sentence:{{output:final}}"""

    mapper = semantic_function(max_tokens=8)(summarize)
    chunks = ["The cat sat on the mat all day.", "Rain fell over the quiet harbour town.",
              "The market opens at dawn and closes at noon."]
    with SemanticSession(engine, namespace=f"semantic-mr-{next(_ns)}", **options) as s:
        parts = [mapper(c) for c in chunks]
        final = combine(*parts)
        result = final.get(perf=Perf.LATENCY), [p.get() for p in parts]
    prompts = [instruction + f"\n\nText: {c}\nOne-line summary:" for c in chunks]
    return s, result, prompts


def test_map_reduce_objectives_sharing_and_outputs(engine, long_text, tokenizer):
    shared, (final, parts), prompts = _map_reduce(engine, long_text)
    alone, (final2, parts2), _ = _map_reduce(engine, long_text, share_prefixes=False)

    assert len(tokenizer.encode(prompts[0], add_special_tokens=False)) > 200
    maps = ["summarize#0", "summarize#1", "summarize#2"]
    assert shared.task_groups() == [maps]
    assert shared.objectives() == {**dict.fromkeys(maps, "throughput"), "combine#0": "latency"}
    assert [n.priority for n in shared.dag.nodes] == [1, 1, 1, LATENCY_BONUS]

    expected = [ref(engine, p, max_tokens=8).strip() for p in prompts]
    reduce_prompt = ("Combine these summaries into one sentence.\n" + "".join(
        f"{i}. {p}\n" for i, p in enumerate(expected, 1)) + "Sentence:")
    assert parts == parts2 == expected
    assert final == final2 == ref(engine, reduce_prompt, max_tokens=8).strip()

    a, b = shared.stats, alone.stats
    print(f"\nmap-reduce: with sharing {a}\n            without     {b}")
    assert a.num_shared_prefix_fills >= 1 and b.num_shared_prefix_fills == 0
    assert a.num_cached_tokens > 0 and a.num_prefill_tokens < a.num_prompt_tokens
    assert a.num_prompt_tokens == b.num_prompt_tokens
    assert a.num_prefill_tokens < b.num_prefill_tokens


def test_a_prefix_fill_does_not_hold_back_requests_that_do_not_share_it(engine, long_text):
    mapper = semantic_function(max_tokens=4)(_with_doc(
        lambda chunk: None, " ".join(long_text.split()[:150])
        + "\n\nText: {{input:chunk}}\nSummary:{{output:summary}}"))
    fills_seen: list[int] = []
    with SemanticSession(engine, namespace=f"semantic-hol-{next(_ns)}") as s:
        def probe(value):
            fills_seen.append(s.stats.num_shared_prefix_fills)
            return value

        parts = [mapper(c) for c in ("The cat sat.", "Rain fell.")]
        quick = s.variable("x", "hi").transform(probe)  # ready in the same round
        assert quick.get() == "hi"
        assert all(p.get() for p in parts)
    assert fills_seen == [0]  # it ran while the shared prefix was being filled
    assert s.stats.num_shared_prefix_fills == 1


def _with_doc(fn, doc: str):
    fn.__doc__ = doc
    fn.__name__ = "summarize"
    return fn


# --- 5. failures and closing --------------------------------------------------------------
def test_failure_reaches_downstream_and_other_branches_finish(engine):
    def boom(value):
        raise ValueError(f"cannot use {value!r}")

    with SemanticSession(engine):
        city = capital("France")
        broken = describe(city.transform(boom))
        too_long = describe("word " * 9000)  # the prompt does not fit the context
        fine = capital("Spain")
        with pytest.raises(SemanticError) as err:
            broken.get()
        assert err.value.function == "boom#0" and isinstance(err.value.error, ValueError)
        with pytest.raises(SemanticError, match="describe#1") as err:
            too_long.get()
        assert isinstance(err.value.error, ValueError)
        assert fine.get() == ref(engine, "Question: What is the capital of Spain?\n"
                                         "Answer:").strip()
        assert city.transform(str.upper).get() == city.get().upper()
    assert _no_kv_held(engine)


def test_misuse_raises_clear_errors(engine):
    with pytest.raises(RuntimeError, match="inside `with SemanticSession"):
        capital("France")
    with SemanticSession(engine) as other:
        foreign = other.variable("country", "France")
        with SemanticSession(engine):
            with pytest.raises(ValueError, match="cannot cross sessions"):
                capital(foreign)


@semantic_function(max_tokens=16, ignore_eos=True)
def ramble(topic: SemanticVariable):
    """Tell a long story about {{input:topic}}.{{output:start}} And then{{output:rest}}"""


# closing a sync session mid-flight: tests/semantic/test_semantic_backends.py (both backends)


# --- 6. the async API ---------------------------------------------------------------------
async def test_async_api_and_close_mid_flight(engine):
    async with SemanticSession(engine) as s:
        sentence = describe(capital("Germany"))
        got = await sentence.aget()
        with pytest.raises(RuntimeError, match="aget"):
            sentence.get()
    city = ref(engine, "Question: What is the capital of Germany?\nAnswer:").strip()
    assert got == ref(engine, f"Write one sentence about the city of {city}.\n"
                              "Sentence:").strip()
    assert s.stats.num_requests == 2

    async with SemanticSession(engine) as s:
        start, rest = ramble("a lighthouse")
        pending = asyncio.ensure_future(rest.aget())
        deadline = time.monotonic() + 30
        while engine.load().num_running == 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.002)
    with pytest.raises(SemanticError, match="closed"):
        await pending
    assert _no_kv_held(engine)


def test_the_old_import_path_still_works():
    """Semantic functions moved to agentrt.semantic; code that imported them from
    agentrt.graph (the README's earlier example) gets the same objects."""
    import agentrt.semantic
    from agentrt.graph import Perf, SemanticSession, SemanticVariable, semantic_function

    assert SemanticSession is agentrt.semantic.SemanticSession
    assert Perf is agentrt.semantic.Perf
    assert SemanticVariable is agentrt.semantic.SemanticVariable
    assert semantic_function is agentrt.semantic.semantic_function
