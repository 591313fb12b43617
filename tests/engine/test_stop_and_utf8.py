"""Stop strings across token boundaries; streamed multi-byte UTF-8 never breaks."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from agentrt import SamplingParams
from agentrt.core.detokenizer import IncrementalDetokenizer, find_stop, stop_holdback


def test_stop_string_spanning_tokens(engine, chat, tokenizer):
    prompt = chat("What is the capital of France?")
    full = engine.generate(prompt, SamplingParams(max_tokens=16), namespace="stop").text
    assert "Paris" in full
    # a stop string that starts inside one token and ends inside another
    start = full.index("Paris") - 3
    stop = full[start : start + 6]
    ids = tokenizer.encode(full, add_special_tokens=False)
    pieces = [tokenizer.decode([i]) for i in ids]
    assert not any(stop in p for p in pieces)  # no single token contains it
    out = engine.generate(prompt, SamplingParams(max_tokens=16, stop=[stop]), namespace="stop")
    assert out.text == full[:start]
    assert out.finish_reason == "stop" and out.stop_reason == stop
    streamed = "".join(d.text for d in engine.stream(prompt, SamplingParams(
        max_tokens=16, stop=[stop])))
    assert streamed == full[:start]


def test_streamed_emoji_never_broken(engine, tokenizer):
    text = "Weather today: ☀️🌧️🌈 and snow ❄️, café, naïve, 日本語."
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert any("\ufffd" in tokenizer.decode([i]) for i in ids)  # some tokens split characters
    detok = IncrementalDetokenizer(tokenizer, [])
    deltas = [detok.push([i]) for i in ids]
    assert all("\ufffd" not in d for d in deltas)
    assert "".join(deltas) == text


def test_async_stream_of_emoji_prompt(engine, chat):
    prompt = chat("Reply with three emoji about the ocean.")

    async def collect() -> tuple[str, str]:
        deltas = [d async for d in engine.astream(prompt, SamplingParams(max_tokens=20))]
        return "".join(d.text for d in deltas), deltas[-1].finish_reason

    streamed, reason = asyncio.run(collect())
    whole = engine.generate(prompt, SamplingParams(max_tokens=20))
    assert reason in ("stop", "length")
    assert "\ufffd" not in streamed and streamed == whole.text


def test_find_stop_and_holdback():
    assert find_stop("abc Observation: x", ("Observation",), 5) == (4, "Observation")
    assert find_stop("abc", ("zz",), 0) is None
    assert stop_holdback("text\nObs", ("\nObservation",)) == 4
    assert stop_holdback("text", ("\nObservation",)) == 0


@settings(max_examples=400, deadline=None)
@given(st.text("ab\n", max_size=12), st.lists(st.text("ab\n", max_size=6), max_size=3))
def test_holdback_is_the_longest_end_of_the_text_that_begins_a_stop(text, stops):
    """Against the definition: the longest n < len(stop) with text ending in stop[:n]."""
    want = max((n for stop in stops for n in range(1, min(len(stop) - 1, len(text)) + 1)
                if text.endswith(stop[:n])), default=0)
    assert stop_holdback(text, tuple(stops)) == want
