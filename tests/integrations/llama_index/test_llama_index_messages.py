"""LlamaIndex messages ↔ OpenAI-format dicts, tool calls as blocks, tool preparation, tools."""

from __future__ import annotations

import pytest
from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ImageBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
)
from llama_index.core.tools import FunctionTool
from llama_index.llms.agentrt import AgentRT, react_grammar, to_llama_index
from llama_index.llms.agentrt.messages import (
    assistant_message,
    keep_first_call,
    to_openai_messages,
    tool_selections,
)

from agentrt.chat import render_prompt


def multiply(a: float, b: float) -> float:
    """Multiply two numbers."""
    return a * b


def test_user_system_assistant_and_tool_messages_convert():
    messages = [
        ChatMessage(role="system", content="Be brief."),
        ChatMessage(role="user", content="17 * 23?"),
        ChatMessage(role="assistant", blocks=[
            ThinkingBlock(content="hidden"), TextBlock(text="Let me compute."),
            ToolCallBlock(tool_call_id="c1", tool_name="multiply",
                          tool_kwargs={"a": 17, "b": 23})]),
        ChatMessage(role="tool", content="391", additional_kwargs={"tool_call_id": "c1"}),
        ChatMessage(role="assistant", content="It is 391."),
    ]
    assert to_openai_messages(messages) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "17 * 23?"},
        {"role": "assistant", "content": "Let me compute.", "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "multiply", "arguments": '{"a": 17, "b": 23}'}}],
         "reasoning_content": "hidden"},  # the chat template decides whether it shows
        {"role": "tool", "content": "391", "tool_call_id": "c1", "name": None},
        {"role": "assistant", "content": "It is 391.", "tool_calls": []},
    ]


def test_tool_calls_in_additional_kwargs_are_read_too():
    """Messages built by hand (or by other integrations) carry OpenAI-format calls there."""
    call = {"id": "c9", "type": "function",
            "function": {"name": "multiply", "arguments": '{"a": 2, "b": 3}'}}
    message = ChatMessage(role="assistant", content="", additional_kwargs={"tool_calls": [call]})
    assert to_openai_messages([message])[0]["tool_calls"] == [call]
    assert [(s.tool_id, s.tool_name, s.tool_kwargs) for s in tool_selections(message)] == \
        [("c9", "multiply", {"a": 2, "b": 3})]


def test_media_blocks_are_refused_text_only_engine():
    message = ChatMessage(role="user", blocks=[ImageBlock(url="https://example.com/a.png")])
    with pytest.raises(ValueError, match="text-only"):
        to_openai_messages([message])


def test_an_answer_with_calls_is_blocks_and_openai_kwargs():
    message = assistant_message("", [{"id": "c1", "name": "multiply", "args": {"a": 1}}])
    assert message.content is None and message.role == "assistant"
    assert message.blocks == [ToolCallBlock(tool_call_id="c1", tool_name="multiply",
                                            tool_kwargs={"a": 1})]
    assert message.additional_kwargs["tool_calls"][0]["function"]["arguments"] == '{"a": 1}'
    assert assistant_message("Hi", []).content == "Hi"
    assert assistant_message("", []).content == ""


def test_partial_arguments_parse_as_far_as_they_go():
    streamed = assistant_message("", [{"id": "c1", "name": "multiply", "args": '{"a": 17, "b'}])
    assert tool_selections(streamed)[0].tool_kwargs == {"a": 17}
    assert tool_selections(assistant_message("", [{"id": "c", "name": "m", "args": ""}])) \
        [0].tool_kwargs == {}


def test_keep_first_call():
    calls = [{"id": f"c{i}", "name": "multiply", "args": {"a": i}} for i in range(3)]
    message = assistant_message("text", calls)
    keep_first_call(message)
    assert [s.tool_id for s in tool_selections(message)] == ["c0"]
    assert message.content == "text" and len(message.additional_kwargs["tool_calls"]) == 1


def test_prepare_chat_with_tools_maps_tool_required_and_choice():
    llm = AgentRT(engine=object())  # NOTE: preparing needs no engine
    tool = FunctionTool.from_defaults(multiply)
    history = [ChatMessage(role="user", content="Hi")]
    out = llm._prepare_chat_with_tools([tool], user_msg="2 * 3?", chat_history=history,
                                       tool_required=True)
    assert [m.content for m in out["messages"]] == ["Hi", "2 * 3?"] and len(history) == 1
    assert out["tools"] == [tool.metadata.to_openai_tool()]
    assert out["tool_choice"] == "required" and out["parallel_tool_calls"] is False
    assert llm._prepare_chat_with_tools([tool])["tool_choice"] == "auto"
    named = llm._prepare_chat_with_tools([tool], tool_choice="multiply", tool_required=True)
    assert named["tool_choice"] == "multiply"
    assert llm._prepare_chat_with_tools([])["tool_choice"] is None


def test_no_tool_call_raises_only_when_asked():
    llm = AgentRT(engine=object())
    response = ChatResponse(message=assistant_message("no call", []))
    assert llm.get_tool_calls_from_response(response, error_on_no_tool_call=False) == []
    with pytest.raises(ValueError, match="0 tool calls"):
        llm.get_tool_calls_from_response(response)


def test_history_renders_with_the_models_template(engine):
    """The shared template layer shows calls and results as Hermes blocks to SmolLM2."""
    messages = [ChatMessage(role="user", content="2 * 3?"),
                assistant_message("", [{"id": "c1", "name": "multiply", "args": {"a": 2}}]),
                ChatMessage(role="tool", content="6", additional_kwargs={"tool_call_id": "c1"})]
    prompt = render_prompt(engine.tokenizer, to_openai_messages(messages))
    assert '<tool_call>\n{"name": "multiply", "arguments": {"a": 2}}\n</tool_call>' in prompt
    assert "<tool_response>\n6\n</tool_response>" in prompt


def test_agentrt_tools_keep_their_json_schema_and_run_for_real(runtime):
    calculator = to_llama_index("calculator", runtime, session="unit")
    assert calculator.metadata.get_parameters_dict() == runtime.tools["calculator"].parameters
    assert calculator.metadata.to_openai_tool()["function"]["name"] == "calculator"
    assert calculator.call(expression="17 * 23").content == "391"
    assert calculator("2 ** 10").content == "1024"  # a single input → the main argument
    failed = calculator.call(expression="1 / 0")
    assert failed.is_error and "calculator" in failed.content
    sqlite = to_llama_index("sqlite", runtime, session="unit")
    out = sqlite.call(query="SELECT SUM(amount) FROM orders WHERE customer = 'alice'")
    assert out.content == "SUM(amount)\n42.0\n(1 row)" and not out.is_error


def test_react_grammar_compiles_for_agentrt_and_function_tools(engine, runtime):
    from agentrt.constrained import get_grammar_backend

    tools = [to_llama_index("calculator", runtime), FunctionTool.from_defaults(multiply)]
    grammar = react_grammar(tools)
    assert "Action: calculator\\nAction Input: " in grammar
    get_grammar_backend(engine).ebnf(grammar)  # NOTE: raises if xgrammar cannot compile it
    with pytest.raises(ValueError):
        react_grammar([])


def test_several_thinking_blocks_go_to_the_template_as_separate_paragraphs():
    message = ChatMessage(role="assistant", blocks=[
        ThinkingBlock(content="First."), ThinkingBlock(content=None),
        ThinkingBlock(content="Second."), TextBlock(text="Done.")])
    [out] = to_openai_messages([message])
    assert out["reasoning_content"] == "First.\n\nSecond." and out["content"] == "Done."
