"""What a chat call reads needs what the format writes: every marker of a call survives
decoding where it is a special token (Mistral v11+'s ``[ARGS]``, ``[CALL_ID]``), and the
request's tool schemas type the values of formats that write them as text (Qwen3-Coder)."""

from __future__ import annotations

import pytest
from tiny_mistral import ScriptedBackend, mistral_tokenizer

from agentrt.chat import ChatProgress, prepare_chat, run_deltas


def _tool(name: str, kind: str) -> dict:
    return {"type": "function", "function": {"name": name, "parameters": {
        "type": "object", "properties": {"value": {"type": kind}}}}}


def _run(template: str, output: str, tools: list[dict], specials=()) -> ChatProgress:
    tokenizer = mistral_tokenizer(template, specials=specials)
    call = prepare_chat(ScriptedBackend(tokenizer, [output]),
                        [{"role": "user", "content": "go"}], tools=tools, constrained=False)
    progress = ChatProgress(call)
    for delta in run_deltas(call):
        progress.feed(delta)
    return progress


@pytest.mark.parametrize(("template", "output", "specials"), [
    ("ministral-3.jinja", '[TOOL_CALLS]echo[ARGS]{"value": "hi"}</s>', ("[ARGS]",)),
    ("mistral-v11.jinja", '[TOOL_CALLS]echo[CALL_ID]a1b2c3d4e[ARGS]{"value": "hi"}</s>',
     ("[ARGS]", "[CALL_ID]")),
])
def test_argument_markers_that_are_special_tokens_survive_decoding(template, output, specials):
    progress = _run(template, output, [_tool("echo", "string")], specials)
    assert [(c["name"], c["args"]) for c in progress.tool_calls] == [("echo", {"value": "hi"})]
    assert progress.invalid_tool_calls == [] and progress.content == ""


@pytest.mark.parametrize(("kind", "value"), [("string", "42"), ("integer", 42)])
def test_xml_parameters_are_typed_by_the_requests_tool_schema(kind, value):
    output = ("<tool_call>\n<function=echo>\n<parameter=value>\n42\n</parameter>\n"
              "</function>\n</tool_call><|im_end|>")
    progress = _run("qwen3-coder.jinja", output, [_tool("echo", kind)])
    assert [(c["name"], c["args"]) for c in progress.tool_calls] == [("echo", {"value": value})]
