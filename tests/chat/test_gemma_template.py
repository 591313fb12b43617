"""Gemma 3's chat template renders no tools and refuses a ``tool`` turn: agentrt writes its
Hermes convention for it (tools in the system note, ``<tool_call>`` JSON calls, grammar-
constrained as for every family: tests/chat/test_chat_formats_model.py), and a round's tool
results become one user turn of ``<tool_response>`` blocks, so the turns still alternate."""

from __future__ import annotations

from pathlib import Path

from agentrt.chat.formats import detect_format
from agentrt.chat.template import render_prompt, template_caps

GEMMA = (Path(__file__).parent / "templates" / "gemma3.jinja").read_text()
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather.",
                                           "parameters": {"type": "object", "properties": {
                                               "city": {"type": "string"}}}}}]


def call(i: int) -> dict:
    return {"id": f"c{i}", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}


def test_a_tool_round_renders_as_alternating_gemma_turns(tokenizer):
    caps = template_caps(tokenizer, GEMMA)
    assert not (caps.renders_tools or caps.renders_tool_calls or caps.takes_tool_role)
    assert detect_format(GEMMA).name == "hermes"
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": "", "tool_calls": [call(1), call(2)]},
                {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
                {"role": "tool", "tool_call_id": "c2", "content": "warm"}]
    prompt = render_prompt(tokenizer, messages, TOOLS, chat_template=GEMMA)
    assert prompt.count("<start_of_turn>user\n") == 2
    assert prompt.count("<start_of_turn>model\n") == 2 and prompt.endswith("model\n")
    assert "<tools>" in prompt and prompt.count('<tool_call>\n{"name": "get_weather"') == 2
    results = prompt.split("<start_of_turn>user\n")[2]
    assert "<tool_response>\nsunny\n</tool_response>" in results and "warm" in results


def test_templates_that_take_a_tool_role_keep_it(tokenizer):
    assert template_caps(tokenizer).takes_tool_role  # the default model's (ChatML)
