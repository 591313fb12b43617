"""``chat_template_kwargs``: variables the chat template reads (Qwen3's ``enable_thinking``),
passed by ``prepare_chat`` and ``agentrt serve`` (vLLM's and SGLang's field), never able to
replace the template, the conversation or the tools."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrt.chat import prepare_chat
from agentrt.chat.template import render_prompt

QWEN3 = (Path(__file__).parent / "templates" / "qwen3.jinja").read_text()
HELLO = [{"role": "user", "content": "Hello"}]
CLOSED = "<think>\n\n</think>\n\n"


def test_enable_thinking_false_closes_qwen3s_think_block(engine):
    thinking = render_prompt(engine.tokenizer, HELLO, chat_template=QWEN3)
    plain = render_prompt(engine.tokenizer, HELLO, chat_template=QWEN3,
                          template_kwargs={"enable_thinking": False})
    assert not thinking.endswith(CLOSED) and plain == thinking + CLOSED
    call = prepare_chat(engine, HELLO, chat_template=QWEN3, max_tokens=2,
                        chat_template_kwargs={"enable_thinking": False})
    assert engine.decode(call.prompt_ids).endswith(CLOSED)


def test_a_variable_the_template_does_not_read_changes_nothing(engine):
    assert render_prompt(engine.tokenizer, HELLO, template_kwargs={"unused": 1}) == \
        render_prompt(engine.tokenizer, HELLO)


@pytest.mark.parametrize("kwargs, says", [
    ({"chat_template": "{{ 'pwned' }}"}, "set by agentrt itself"),
    ({"messages": []}, "set by agentrt itself"),
    ({"tools": []}, "set by agentrt itself"),
    ({"add_generation_prompt": False}, "set by agentrt itself"),
    ({"tokenize": True}, "set by agentrt itself"),
    ({"not a name": 1}, "not a plain name"),
    ({1: 1}, "not a plain name"),
    (["enable_thinking"], "mapping"),
])
def test_variables_that_would_take_over_the_call_are_refused(engine, kwargs, says):
    with pytest.raises(ValueError, match=says):
        prepare_chat(engine, HELLO, max_tokens=2, chat_template_kwargs=kwargs)


# --- the framework models pass them on (a reserved name proves they reach the template) -----
def test_chat_agentrt_passes_template_variables_on(engine):
    from langchain_agentrt import ChatAgentRT

    llm = ChatAgentRT(engine=engine, max_tokens=2)
    plain = llm.invoke("Hello").content
    assert llm.bind(chat_template_kwargs={"enable_thinking": False}).invoke("Hello").content \
        == plain
    with pytest.raises(ValueError, match="set by agentrt itself"):
        ChatAgentRT(engine=engine, max_tokens=2, chat_template_kwargs={"tools": []}).invoke("Hi")
    with pytest.raises(ValueError, match="set by agentrt itself"):
        llm.invoke("Hi", chat_template_kwargs={"messages": []})


def test_llama_index_agentrt_passes_template_variables_on(engine):
    pytest.importorskip("llama_index.core", reason="needs the [llamaindex] extra")
    from llama_index.core.llms import ChatMessage
    from llama_index.llms.agentrt import AgentRT

    llm = AgentRT(engine=engine, max_tokens=2, chat_template_kwargs={"enable_thinking": False})
    assert llm.complete("Hello").text == AgentRT(engine=engine, max_tokens=2).complete("Hello").text
    with pytest.raises(ValueError, match="set by agentrt itself"):
        llm.chat([ChatMessage(role="user", content="Hi")], chat_template_kwargs={"tools": []})
