"""The tool runtime: workers, early rejection, lazy mode, crashes and timeouts stay contained."""

from __future__ import annotations

import os

import pytest
from toy_tools import EchoTool, MisbehavingTool, ThreadEchoTool

from agentrt.agent import ToolRuntime, create_tool
from agentrt.agent.parsers.base import Piece


@pytest.fixture(scope="module")
def runtime():
    with ToolRuntime([EchoTool(), MisbehavingTool(), ThreadEchoTool(), "python_repl"]) as rt:
        yield rt


def arg(key, value):
    return Piece("argument", key=key, value=value)


def test_tools_run_in_a_worker_process(runtime):
    pid = int(runtime.run("misbehaving", {"how": "nothing"}).text.split()[1])
    assert pid != os.getpid()
    assert runtime.run("echo", {"text": "hi", "n": 2}).text == "n=2 text=hi"


def test_a_rejected_piece_stops_the_call_with_its_error(runtime):
    call = runtime.start("echo")
    call.feed(arg("text", "fine"))
    call.feed(arg("n", "bad"))  # wrong type: the schema says integer
    call.feed(arg("text", "more"))
    assert "must be integer" in call.wait()
    assert call.rejected_at == 1
    obs = call.finish()
    assert obs.is_error and obs.rejected_at == 1 and "must be integer" in obs.text
    assert [t.index for t in obs.timings] == [0, 1, 2]


def test_lazy_mode_defers_all_work_to_finish(runtime):
    lazy = runtime.start("echo", lazy=True)
    lazy.feed(arg("text", "bad"))
    assert lazy.wait() is None  # buffered: nothing checked yet
    obs = lazy.finish()
    assert obs.is_error and "not allowed" in obs.text and obs.rejected_at is None


def test_partial_and_lazy_python_give_the_same_observation(runtime):
    code = ["x = 6\n", "for i in range(2):\n    print(i * x)\n", "x * 7\n"]
    results = []
    for lazy in (False, True):
        call = runtime.start("python_repl", session=f"lazy={lazy}", lazy=lazy)
        for statement in code:
            call.feed(Piece("statement", statement))
        call.wait()
        results.append(call.finish())
    partial, lazy = results
    assert partial.text == lazy.text == "0\n6\n42\n"
    # partial: every statement ran when it was fed, before finish() was asked for
    assert all(t.ended <= partial.finish_started for t in partial.timings)
    assert lazy.timings[-1].ended <= lazy.finish_started  # lazy feeds only buffer


def test_a_bug_in_a_tool_is_an_error_observation(runtime):
    obs = runtime.run("misbehaving", {"how": "raise"})
    assert obs.is_error and "ZeroDivisionError: a bug in the tool" in obs.text


def test_a_crashing_tool_does_not_reach_the_caller(runtime):
    obs = runtime.run("misbehaving", {"how": "exit"}, session="crash")
    assert obs.is_error and "died unexpectedly" in obs.text
    again = runtime.run("misbehaving", {"how": "nothing"}, session="crash")  # a fresh worker
    assert not again.is_error


def test_a_hanging_tool_is_killed_at_the_wall_time_limit(runtime):
    obs = runtime.run("misbehaving", {"how": "sleep"}, session="hang")
    assert obs.is_error and "wall-time limit of 0.5 s exceeded" in obs.text
    assert not runtime.run("misbehaving", {"how": "nothing"}, session="hang").is_error


def test_thread_isolation_runs_in_the_caller(runtime):
    assert runtime.run("thread_echo", {"text": "x"}).text == "text=x"


def test_registry_and_unknown_tools(runtime):
    assert create_tool("calculator").name == "calculator"
    with pytest.raises(KeyError, match="unknown tool 'nope'"):
        runtime.start("nope")
    with pytest.raises(KeyError, match="unknown tool 'nope'"):
        create_tool("nope")


def test_react_input_is_split_into_arguments(runtime):
    call = runtime.start("echo")
    call.feed(Piece("input", '{"text": "a", "n": 3}'))
    assert call.finish().text == "n=3 text=a"
    call = runtime.start("echo")
    call.feed(Piece("input", "plain words"))
    assert call.finish().text == "text=plain words"


def test_a_lone_surrogate_in_a_tool_result_becomes_a_replacement_character(runtime):
    """No tokenizer or JSON encoder takes a lone surrogate: any tool's text is made valid."""
    obs = runtime.run("echo", {"text": "a\ud800b"})
    assert obs.text == "text=a\ufffdb" and not obs.is_error
    obs.text.encode("utf-8")
