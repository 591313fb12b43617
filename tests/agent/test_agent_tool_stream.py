"""Token ids → text → parser → tools, with the real model's tokenizer."""

from __future__ import annotations

import sqlite3
import time

import pytest

from agentrt.agent import ToolRuntime, ToolStream
from agentrt.core.detokenizer import IncrementalDetokenizer
from agentrt_tools.sqlite import SqliteTool

# NOTE: the pause between tokens stands in for the model's decode step (tens of ms on this CPU);
# the assertions compare timestamps only, never durations.
DECODE_STEP_S = 0.02

SCRIPT = """import time
started = time.monotonic()
squares = [i * i for i in range(5)]
for s in squares:
    if s % 2:
        print("odd", s)
    else:
        print("even", s)
total = sum(squares)
print("total", total)
total / 2
"""
REPLY = f"Let me compute that.\n```python\n{SCRIPT}```\nThe script prints the squares."


@pytest.fixture(scope="module")
def runtime(tmp_path_factory):
    db = tmp_path_factory.mktemp("db") / "shop.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, customer TEXT, total REAL)")
        conn.executemany("INSERT INTO orders (customer, total) VALUES (?, ?)", [("ada", 4.0)])
    with ToolRuntime(["python_repl", "calculator", SqliteTool(path=str(db))]) as rt:
        yield rt


def test_incremental_detokenizer_matches_a_full_decode(tokenizer):
    text = "Voilà: 日本語 😀 — ```python\nprint('é')\n```"
    ids = tokenizer.encode(text, add_special_tokens=False)
    detok = IncrementalDetokenizer(tokenizer)
    pieces = [detok.push([i]) for i in ids] + [detok.flush()]
    assert "".join(pieces) == tokenizer.decode(ids)
    assert all("\ufffd" not in p for p in pieces)


def test_fenced_script_starts_before_the_closing_fence(tokenizer, runtime):
    ids = tokenizer.encode(REPLY, add_special_tokens=False)
    fence_at = next(i for i in range(len(ids)) if tokenizer.decode(ids[: i + 1]).count("```") == 2)
    stream = ToolStream(tokenizer, runtime, parser="fenced_code", session="stream")
    fence_fed_at = None
    for i, token in enumerate(ids):
        if i == fence_at:
            fence_fed_at = time.monotonic()
        assert stream.on_tokens([token]) == "continue"
        time.sleep(DECODE_STEP_S)
    stream.close()
    assert stream.call_complete
    observation = stream.observation()
    assert not observation.is_error
    # executed inside the worker while the model was still writing the block
    assert observation.timings[0].started < fence_fed_at
    assert observation.timings[-2].ended < observation.finish_started
    # the same as running the whole script at once (in a fresh interpreter)
    whole = runtime.run("python_repl", {"code": SCRIPT}, session="whole")
    assert observation.text == whole.text
    assert observation.text.endswith("total 30\n15.0\n")


def test_a_missing_column_stops_the_decode_of_the_call(tokenizer, runtime):
    reply = (
        '<tool_call>{"name": "sqlite", "arguments": {"query": "SELECT customer, amount_usd '
        'FROM orders WHERE total > 3 ORDER BY customer DESC LIMIT 10"}}</tool_call>'
    )
    ids = tokenizer.encode(reply, add_special_tokens=False)
    stream = ToolStream(tokenizer, runtime, session="sql", wait_for_tools=True)
    decisions = [stream.on_tokens([token]) for token in ids]
    assert "abort" in decisions
    stop = decisions.index("abort") + 1
    assert stream.abort_at == stop < len(ids)
    written = tokenizer.decode(ids[:stop])
    assert "amount_usd FROM orders WHERE" in written and "ORDER BY" not in written
    observation = stream.observation()
    assert observation.is_error and "no such column: amount_usd" in observation.text


def test_an_unknown_tool_is_rejected_at_its_name(tokenizer, runtime):
    reply = '<tool_call>{"name": "web_browser", "arguments": {"url": "http://example.com"}}'
    ids = tokenizer.encode(reply, add_special_tokens=False)
    stream = ToolStream(tokenizer, runtime)
    decisions = [stream.on_tokens([token]) for token in ids]
    stop = decisions.index("abort") + 1
    assert "arguments" not in tokenizer.decode(ids[:stop])
    assert "unknown tool 'web_browser'" in stream.observation().text


def test_react_action_through_the_stream(tokenizer, runtime):
    reply = "Thought: I need to multiply.\nAction: calculator\nAction Input: 200 * 701"
    stream = ToolStream(tokenizer, runtime, parser="react")
    for token in tokenizer.encode(reply, add_special_tokens=False):
        assert stream.on_tokens([token]) == "continue"
    stream.close()
    assert stream.observation().text == "140200"


def test_truncated_json_call_gives_an_error_observation(tokenizer, runtime):
    reply = '<tool_call>{"name": "calculator", "arguments": {"expression": "2 +'
    stream = ToolStream(tokenizer, runtime)
    for token in tokenizer.encode(reply, add_special_tokens=False):
        stream.on_tokens([token])
    assert stream.close() == "abort"
    assert "truncated tool call" in stream.observation().text
