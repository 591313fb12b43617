"""OpenAI-format messages through the model's chat template (the layer every front end uses)."""

from __future__ import annotations

import pytest

from agentrt.chat import format_tool_call, prepare_chat, render_prompt, template_caps

TOOL = {"type": "function", "function": {
    "name": "multiply", "description": "Multiply two numbers.",
    "parameters": {"type": "object", "properties": {"a": {"type": "number"},
                                                    "b": {"type": "number"}},
                   "required": ["a", "b"]}}}


def test_smollm2_template_gets_the_hermes_convention(tokenizer):
    caps = template_caps(tokenizer)
    assert not caps.renders_tools and not caps.renders_tool_calls
    messages = [
        {"role": "user", "content": "What is 3 times 7?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "multiply", "arguments": '{"a": 3, "b": 7}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "21"},
    ]
    prompt = render_prompt(tokenizer, messages, [TOOL])
    assert '"name": "multiply"' in prompt.split("\n</tools>")[0]  # signatures in the system turn
    assert format_tool_call("multiply", {"a": 3, "b": 7}) in prompt  # string args parsed
    assert "<tool_response>\n21\n</tool_response>" in prompt
    assert prompt.endswith("<|im_start|>assistant\n")


def test_text_parts_and_developer_role(tokenizer):
    parts = [{"type": "text", "text": "Hello, "}, {"type": "text", "text": "world"}]
    prompt = render_prompt(tokenizer, [{"role": "developer", "content": "Be brief."},
                                       {"role": "user", "content": parts}])
    assert "<|im_start|>system\nBe brief." in prompt
    assert "Hello, world" in prompt


@pytest.mark.parametrize("message, error", [
    ({"role": "wizard", "content": "hi"}, "unknown message role"),
    ({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]},
     "text-only"),
    ({"role": "assistant", "content": "", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{oops"}}]},
     "not valid JSON"),
    ({"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "function"}]},
     r"tool_calls\[0\] must be an object with a 'function' object"),
    ({"role": "assistant", "content": "", "tool_calls": [{"function": "f"}]},
     r"tool_calls\[0\] must be an object"),
    ({"role": "assistant", "content": "", "tool_calls": [7]}, r"tool_calls\[0\] must be"),
    ({"role": "assistant", "content": "", "tool_calls": [{"function": {"arguments": "{}"}}]},
     r"tool_calls\[0\].function.name must be a non-empty string"),
    ({"role": "assistant", "content": "", "tool_calls": [
        {"function": {"name": "f", "arguments": 7}}]}, "must be a JSON object, got 7"),
    ({"role": "assistant", "content": "", "tool_calls": "f()"}, "tool_calls must be a list"),
    ({"role": "user", "content": [{"type": "text", "text": 5}]}, "text must be a string"),
    ({"role": "user", "content": [5]}, "content part must be an object"),
    ({"role": "user", "content": 5}, "content must be a string, a list of parts or null"),
])
def test_bad_messages_raise_clear_errors(tokenizer, message, error):
    with pytest.raises(ValueError, match=error):
        render_prompt(tokenizer, [message])


def test_prepare_chat_builds_a_constrained_request(engine):
    call = prepare_chat(engine, [{"role": "user", "content": "What is 3 times 7?"}],
                        tools=[TOOL], tool_choice="required", max_tokens=40, stop=["\n\n"])
    assert call.params.grammar is not None and call.params.grammar.kind == "structural_tag"
    assert call.params.max_tokens == 40 and call.params.stop == ("\n\n",)
    assert engine.tokenizer.decode(call.prompt_ids).endswith("<|im_start|>assistant\n")
    with pytest.raises(ValueError, match="does not name a bound tool"):
        prepare_chat(engine, [{"role": "user", "content": "hi"}], tools=[TOOL],
                     tool_choice={"type": "function", "function": {"name": "divide"}})


REASONED_STEP = [  # an agent's tool step: the model reasoned, then called
    {"role": "user", "content": "What is 3 times 7?"},
    {"role": "assistant", "content": "", "reasoning_content": "Multiply them.", "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "multiply", "arguments": '{"a": 3, "b": 7}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "21"},
]


def test_reasoning_goes_to_the_template_which_keeps_it_in_the_tool_steps(tokenizer):
    from pathlib import Path

    qwen3 = (Path(__file__).parent / "templates" / "qwen3.jinja").read_text()
    step = render_prompt(tokenizer, REASONED_STEP, [TOOL], chat_template=qwen3)
    assert "<|im_start|>assistant\n<think>\nMultiply them.\n</think>\n\n<tool_call>" in step
    later = render_prompt(tokenizer, [*REASONED_STEP, {"role": "assistant", "content": "21."},
                                      {"role": "user", "content": "And 4 times 5?"}],
                          [TOOL], chat_template=qwen3)
    assert "Multiply them." not in later  # before the last user message: Qwen3 drops it
    assert "Multiply them." not in render_prompt(tokenizer, REASONED_STEP, [TOOL])  # SmolLM2


@pytest.mark.parametrize("bad", [42, ["Multiply them."], {"text": "x"}])
def test_reasoning_that_is_not_text_is_refused(tokenizer, bad):
    messages = [REASONED_STEP[0], {**REASONED_STEP[1], "reasoning_content": bad}]
    with pytest.raises(ValueError, match="reasoning_content must be a string"):
        render_prompt(tokenizer, messages, [TOOL])
