"""The tool turns ``render_observation`` appends are the ones the model family's own chat
template writes: prompt + the call as the model writes it + the render = the template's
rendering of that conversation (Mistral v13's ``[TOOL_CALLS]name[ARGS]``, Qwen3-Coder's XML)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from agentrt.agent import Observation, render_observation

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "chat"))
from tiny_mistral import mistral_tokenizer  # noqa: E402

ARGS = {"value": "hi"}
CALLS = {  # as the model writes the call, up to where the partial-execution parser ends it
    "mistral_args": ("ministral-3.jinja", '[TOOL_CALLS]echo[ARGS]{"value": "hi"}'),
    "qwen_xml": ("qwen3-coder.jinja",
                 "<tool_call>\n<function=echo>\n<parameter=value>\nhi\n</parameter>\n"
                 "</function>"),
}


@pytest.mark.parametrize("syntax", sorted(CALLS))
def test_the_tool_turn_is_the_templates(syntax):
    template, call = CALLS[syntax]
    tokenizer = mistral_tokenizer(template)
    user = [{"role": "user", "content": "go"}]
    turn = [{"role": "assistant", "content": "", "tool_calls": [{
        "id": "abcdefghi", "type": "function",
        "function": {"name": "echo", "arguments": ARGS}}]},
        {"role": "tool", "tool_call_id": "abcdefghi", "content": "RESULT"}]
    prompt = tokenizer.apply_chat_template(user, tokenize=False, add_generation_prompt=True)
    whole = tokenizer.apply_chat_template(user + turn, tokenize=False,
                                          add_generation_prompt=True)
    rendered = render_observation(Observation(tool="echo", text="RESULT"), syntax)
    assert prompt + call + rendered == whole
