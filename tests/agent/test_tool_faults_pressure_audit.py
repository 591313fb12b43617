"""A tool that fails while an agent runs next to other requests (audit H50).

A tool that raises while its call is still being written (streamed, partial execution),
whose process dies, or that hangs past its wall-time limit: the agent gets an error
observation naming what went wrong, its request frees its KV, and the request decoding next
to it on the same engine finishes with exactly the tokens it has alone.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pytest

from agentrt.agent import (
    ArgumentInvocation,
    Invocation,
    SandboxConfig,
    Tool,
    ToolRuntime,
    run_with_tools,
)
from agentrt.core.sampling_params import SamplingParams

NEIGHBOUR = SamplingParams(max_tokens=10, ignore_eos=True)
TOOL_PARAMS = SamplingParams(max_tokens=12)


@dataclass(frozen=True)
class FaultyTool(Tool):
    """Goes wrong as soon as its ``how`` argument is written: a value starting with "raise"
    raises (a bug in the tool), "exit" kills its process, "sleep" hangs (imported by name in
    the tool's worker process)."""

    name: ClassVar[str] = "misbehaving"
    description: ClassVar[str] = "a tool that goes wrong"
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object", "properties": {"how": {"type": "string"}}}
    sandbox: SandboxConfig = field(default_factory=lambda: SandboxConfig(max_wall_s=0.5))

    def start(self) -> Invocation:
        return _Faulty(self)


class _Faulty(ArgumentInvocation):
    def on_value(self, key: str, value: Any) -> None:
        if value.startswith("sleep"):
            time.sleep(3600)
        elif value.startswith("exit"):
            os._exit(7)
        elif value.startswith("raise"):
            raise ZeroDivisionError("a bug in the tool")

    def run(self, arguments: dict[str, Any]) -> str:
        return f"pid {os.getpid()}"


@pytest.fixture(scope="module")
def runtime():
    with ToolRuntime([FaultyTool()]) as rt:
        yield rt


@pytest.fixture(scope="module")
def prompts(engine):
    system = ("Call a tool by writing <tool_call>{\"name\": ..., \"arguments\": {...}}"
              "</tool_call>. Tools: " + json.dumps([{"name": "misbehaving",
                                                     "parameters": {"how": "string"}}]))

    def chat(question: str, system: str | None = None) -> str:
        messages = [{"role": "system", "content": system}] if system else []
        messages.append({"role": "user", "content": question})
        return engine.tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                    tokenize=False)

    return chat("Run the tool.", system), chat("Write a sentence about the sea.")


_ALONE: dict[str, list[int]] = {}


def _alone(engine, prompt: str) -> list[int]:
    """The neighbour's tokens alone on the engine (computed once)."""
    if prompt not in _ALONE:
        _ALONE[prompt] = engine.generate(prompt, NEIGHBOUR).token_ids
    return _ALONE[prompt]


@pytest.mark.parametrize(("how", "error"), [
    ("raise", "ZeroDivisionError: a bug in the tool"),
    ("exit", "died unexpectedly"),
    ("sleep", "wall-time limit of 0.5 s exceeded"),
])
def test_a_failing_tool_is_an_error_and_its_neighbour_decodes_on(engine, runtime, prompts,
                                                                 how, error):
    tool_prompt, other = prompts
    alone = _alone(engine, other)
    runs: list = []
    failures: list[BaseException] = []

    def agent() -> None:
        try:
            runs.append(run_with_tools(
                engine, tool_prompt, TOOL_PARAMS, tools=runtime, session=f"fault-{how}",
                reply_prefix='<tool_call>{"name": "misbehaving", "arguments": {"how": "' + how,
                max_calls=1))
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    thread = threading.Thread(target=agent)
    got: list[int] = []
    for delta in engine.stream(other, NEIGHBOUR):
        got.extend(delta.token_ids)
        if len(got) == 1:
            thread.start()  # the agent's call is written while the neighbour decodes
    thread.join(120)
    assert not thread.is_alive() and not failures, failures
    assert got == alone
    (run,) = runs
    assert run.observations and run.observations[0].is_error, run.text
    assert error in run.observations[0].text
    assert run.segments and run.segments[0].observation.is_error
    load = engine.load()
    assert not engine.core.requests
    assert load.num_free_blocks + load.num_evictable_blocks == load.num_total_blocks
