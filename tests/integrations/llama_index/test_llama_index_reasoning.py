"""A reasoning model's ``<think>`` text in AgentRT, as LlamaIndex's own integrations for
reasoning models give it: a ``ThinkingBlock`` before the answer (``reasoning_content`` kept
in ``additional_kwargs``), streamed as ``ChatResponse.additional_kwargs["thinking_delta"]``
(what an agent's ``AgentStream.thinking_delta`` reads) — never answer text or a tool call —
and left out of the prompt when the message comes back in a history (as the chat layer
leaves out a LangChain ``AIMessage``'s).

The real SmolLM2 engine under a Qwen3 template whose generation prompt opens ``<think>``: the
model's whole output starts as reasoning, and the question makes it close the block itself.
Calls written after reasoning (which the 135M model does not write) come from scripted outputs
in the one-token-a-byte tokenizer of ``tests/chat``, through the same AgentRT and agents.
"""

from __future__ import annotations

import asyncio
import copy
import sys
from pathlib import Path

import pytest
from llama_index.core.agent.workflow import (
    AgentStream,
    FunctionAgent,
    ReActAgent,
    ToolCallResult,
)
from llama_index.core.base.llms.types import (
    ChatMessage,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
)
from llama_index.core.tools import FunctionTool
from llama_index.llms.agentrt import AgentRT, agent_session, react_grammar
from llama_index.llms.agentrt.generation import prepare_call

from agentrt.backends.local import LocalBackend

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "chat"))
from tiny_mistral import TEMPLATES, ScriptedBackend, mistral_tokenizer  # noqa: E402

QWEN3 = (TEMPLATES / "qwen3.jinja").read_text()
OPENS_THINK = QWEN3.replace("'<|im_start|>assistant\\n' }}",
                            "'<|im_start|>assistant\\n<think>\\n' }}")
# NOTE: a wording after which the greedy 135M model writes a thought, then "</think>" and an
# answer (found by trying; most questions keep it thinking to the end)
QUESTION = [ChatMessage(role="user", content="Repeat after me: I know it. </think> Berlin.")]
CONSIDERED = ('Maybe <tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
              "</tool_call>? No, better compute it.")
CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "6*7"}}\n</tool_call>'
THEN_CALL = f"{CONSIDERED}\n</think>\n\n{CALL}</s>"
CHECKED = "The tool says 42."
THEN_ANSWER = f"{CHECKED}\n</think>\n\nIt is 42.</s>"


def calculator(expression: str) -> str:
    """Multiply two integers written as ``a*b``."""
    a, b = expression.split("*")
    return str(int(a) * int(b))


def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    return f"It is sunny in {city}."


TOOLS = [FunctionTool.from_defaults(calculator), FunctionTool.from_defaults(get_weather)]


class ThinkingTemplateBackend(LocalBackend):
    """The real engine, its tokenizer under :data:`OPENS_THINK` (as a reasoning model's)."""

    def __init__(self, engine) -> None:
        super().__init__(engine)
        self._tokenizer = copy.copy(engine.tokenizer)
        self._tokenizer.chat_template = OPENS_THINK

    @property
    def tokenizer(self):
        return self._tokenizer


class AsyncScriptedBackend(ScriptedBackend):
    """Scripted outputs, streamed to async callers too (LlamaIndex agents are async)."""

    model_name = "tiny-scripted"

    async def astream(self, prompt_ids, params=None, **kwargs):
        for delta in self.stream(prompt_ids, params, **kwargs):
            yield delta


@pytest.fixture(scope="module")
def thinking_llm(engine):
    """AgentRT on the real engine with a reasoning template: greedy, short answers."""
    return AgentRT(backend=ThinkingTemplateBackend(engine), max_tokens=32)


def scripted_llm(*outputs: str) -> AgentRT:
    """AgentRT on scripted outputs of a reasoning template (tool calls not constrained: the
    outputs are given)."""
    tokenizer = mistral_tokenizer("qwen3.jinja")
    tokenizer.chat_template = OPENS_THINK
    return AgentRT(backend=AsyncScriptedBackend(tokenizer, list(outputs)), constrained=False)


def prompt_of(llm: AgentRT, messages, **kwargs) -> list[int]:
    return prepare_call(llm, llm.get_backend(), messages, kwargs).prompt_ids


def without_reasoning(message: ChatMessage) -> ChatMessage:
    blocks = [b for b in message.blocks if not isinstance(b, ThinkingBlock)]
    extra = {k: v for k, v in message.additional_kwargs.items() if k != "reasoning_content"}
    return ChatMessage(role=message.role, blocks=blocks, additional_kwargs=extra)


def assert_reasoning_first(message: ChatMessage) -> str:
    """The message's reasoning: its first block, the same in ``reasoning_content``."""
    thinking = message.blocks[0]
    assert isinstance(thinking, ThinkingBlock) and thinking.content
    assert [b for b in message.blocks[1:] if isinstance(b, ThinkingBlock)] == []
    assert message.additional_kwargs["reasoning_content"] == thinking.content
    return thinking.content


def test_chat_gives_the_reasoning_as_a_thinking_block(thinking_llm):
    response = thinking_llm.chat(QUESTION)
    message = response.message
    reasoning = assert_reasoning_first(message)
    assert message.blocks[1:] == [TextBlock(text=message.content)]
    assert message.content and reasoning.strip() not in message.content
    assert "think>" not in message.content + reasoning
    assert "thinking_delta" not in response.additional_kwargs  # a whole answer: no delta
    assert thinking_llm.complete(QUESTION[0].content).text == message.content


def test_stream_chat_streams_reasoning_as_thinking_delta(thinking_llm):
    whole = thinking_llm.chat(QUESTION).message
    chunks = list(thinking_llm.stream_chat(QUESTION))
    thinking = [c.additional_kwargs.get("thinking_delta", "") for c in chunks]
    assert "".join(thinking) == whole.additional_kwargs["reasoning_content"]
    assert "".join(c.delta or "" for c in chunks) == whole.content
    first = chunks[0]  # the output starts inside <think>: reasoning only
    assert first.delta == "" and first.additional_kwargs["thinking_delta"]
    assert first.message.blocks[0] == ThinkingBlock(content=thinking[0])
    assert chunks[-1].message.blocks == whole.blocks
    for chunk in chunks:  # each message so far: its reasoning so far, first
        so_far = chunk.message.additional_kwargs.get("reasoning_content", "")
        assert whole.additional_kwargs["reasoning_content"].startswith(so_far)


def test_async_twins_give_the_same_blocks_and_deltas(thinking_llm):
    whole = thinking_llm.chat(QUESTION)

    async def run():
        answer = await thinking_llm.achat(QUESTION)
        chunks = [c async for c in await thinking_llm.astream_chat(QUESTION)]
        return answer, chunks

    answer, chunks = asyncio.run(run())
    assert answer.message.blocks == whole.message.blocks
    assert "".join(c.additional_kwargs.get("thinking_delta", "") for c in chunks) == \
        whole.message.blocks[0].content
    assert "".join(c.delta or "" for c in chunks) == whole.message.content
    assert chunks[-1].message.blocks == whole.message.blocks


def test_history_round_trip_drops_the_reasoning(thinking_llm):
    answer = thinking_llm.chat(QUESTION).message
    reasoning = assert_reasoning_first(answer)
    follow_up = ChatMessage(role="user", content="And in French?")
    sent = prompt_of(thinking_llm, [*QUESTION, answer, follow_up])
    assert sent == prompt_of(thinking_llm, [*QUESTION, without_reasoning(answer), follow_up])
    other = ChatMessage(role="assistant", blocks=[ThinkingBlock(content="SECRET PLAN"),
                                                  TextBlock(text=answer.content)],
                        additional_kwargs={"reasoning_content": "SECRET PLAN"})
    rendered = thinking_llm.get_backend().tokenizer.decode(
        prompt_of(thinking_llm, [*QUESTION, other, follow_up]))
    assert "SECRET PLAN" not in rendered and reasoning.strip() not in rendered
    assert rendered.count(answer.content) == 1


def test_a_call_after_reasoning_is_the_only_call():
    llm = scripted_llm(THEN_CALL)
    response = llm.chat_with_tools(TOOLS, user_msg="6*7?", tool_required=True)
    message = response.message
    assert assert_reasoning_first(message) == CONSIDERED
    assert [type(b) for b in message.blocks] == [ThinkingBlock, ToolCallBlock]
    calls = llm.get_tool_calls_from_response(response)
    assert [(c.tool_name, c.tool_kwargs) for c in calls] == [("calculator",
                                                              {"expression": "6*7"})]
    assert [c["function"]["name"] for c in message.additional_kwargs["tool_calls"]] == \
        ["calculator"]
    assert not message.content


def test_streamed_tool_calls_never_take_the_considered_call():
    llm = scripted_llm(THEN_CALL)
    chunks = list(llm.stream_chat_with_tools(TOOLS, user_msg="6*7?", tool_required=True))
    assert "".join(c.additional_kwargs.get("thinking_delta", "") for c in chunks) == CONSIDERED
    assert "".join(c.delta or "" for c in chunks) == ""
    named = {s.tool_name for c in chunks
             for s in llm.get_tool_calls_from_response(c, error_on_no_tool_call=False)}
    assert named == {"calculator"}
    assert chunks[-1].message.blocks[0] == ThinkingBlock(content=CONSIDERED)


def test_function_agent_streams_thinking_and_its_tool_step_renders_as_written():
    """The second prompt holds the tool step exactly as the model wrote it: Qwen3's template
    keeps the reasoning of the turns after the last user message (the considered call only
    inside it), so the first prompt and its output are the second prompt's prefix."""
    llm = scripted_llm(THEN_CALL, THEN_ANSWER)
    agent = FunctionAgent(tools=TOOLS, llm=llm, streaming=True)

    async def run():
        handler = agent.run(user_msg="What is 6*7?")
        events = [e async for e in handler.stream_events()]
        return events, await handler

    events, result = asyncio.run(run())
    thinking = "".join(e.thinking_delta or "" for e in events if isinstance(e, AgentStream))
    assert thinking == CONSIDERED + CHECKED
    results = [(e.tool_name, e.tool_output.content) for e in events
               if isinstance(e, ToolCallResult)]
    assert results == [("calculator", "42")]
    assert result.response.content == "It is 42."
    assert result.response.blocks[0] == ThinkingBlock(content=CHECKED)
    backend = llm.get_backend()
    first, second = (backend.tokenizer.decode(p) for p in backend.prompts[:2])
    assert second.startswith(first + THEN_CALL.removesuffix("</s>") + "<|im_end|>")
    assert second.count("get_weather\", \"arguments\"") == 1  # in the reasoning only
    assert "<tool_response>\n42\n</tool_response>" in second


def test_react_grammar_lets_a_reasoning_model_think_first(engine):
    xgr = pytest.importorskip("xgrammar")
    info = xgr.TokenizerInfo.from_huggingface(engine.tokenizer)
    compiler = xgr.GrammarCompiler(info)

    def accepts(grammar: str, text: str) -> bool:
        matcher = xgr.GrammarMatcher(compiler.compile_grammar(grammar))
        return (matcher.accept_string(text) and matcher.accept_token(info.stop_token_ids[0])
                and matcher.is_terminated())

    turn = 'Thought: I can use a tool.\nAction: calculator\nAction Input: {"expression": "6*7"}'
    thought = "Six times seven.\n</think>\n\n"
    opened = react_grammar(TOOLS, "open")  # the template opened <think>: it must close
    assert accepts(opened, thought + turn) and not accepts(opened, turn)
    optional = react_grammar(TOOLS, "detect")
    assert accepts(optional, "<think>\n" + thought + turn) and accepts(optional, turn)
    assert not accepts(react_grammar(TOOLS), thought + turn)


def test_agent_session_reads_the_reasoning_mode_from_the_template(thinking_llm, llm):
    with agent_session(ReActAgent(tools=TOOLS, llm=thinking_llm)) as scope:
        assert scope.grammar == react_grammar(TOOLS, "open")
    with agent_session(ReActAgent(tools=TOOLS, llm=llm)) as scope:  # SmolLM2's own: none
        assert scope.grammar == react_grammar(TOOLS)
