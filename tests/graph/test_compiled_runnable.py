"""compile(chain) is a LangChain ``Runnable``: it composes with ``|``, takes ``with_config``,
streams events, declares the source chain's schemas and goes inside other chains — each
giving what the uncompiled chain gives (the real model, greedy)."""

from __future__ import annotations

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import Runnable, RunnableLambda, RunnableParallel

from agentrt.graph import CompiledGraph, compile
from langchain_agentrt import ChatAgentRT
from langchain_agentrt.lowering.compiled import CompiledRunnable

QUESTION = {"question": "Name a color"}


@pytest.fixture(scope="module")
def chain(engine) -> Runnable:
    prompt = ChatPromptTemplate.from_messages([("system", "Answer in one word."),
                                               ("user", "{question}")])
    return prompt | ChatAgentRT(engine=engine, max_tokens=5) | StrOutputParser()


@pytest.fixture(scope="module")
def fast(chain) -> CompiledRunnable:
    return compile(chain)


class Runs(BaseCallbackHandler):
    def __init__(self) -> None:
        self.started: list[str] = []
        self.ended = 0

    def on_chain_start(self, serialized, inputs, **kwargs):
        self.started.append(kwargs.get("name"))

    def on_chain_end(self, outputs, **kwargs):
        self.ended += 1


def test_a_compiled_chain_is_a_runnable_with_the_sources_name_and_schemas(chain, fast):
    assert isinstance(fast, Runnable) and isinstance(fast.compiled, CompiledGraph)
    assert fast.graph is fast.compiled.graph and len(fast.graph) > 2
    assert fast.get_name() == chain.get_name()
    assert (fast.get_input_schema().model_json_schema()
            == chain.get_input_schema().model_json_schema())
    assert (fast.get_output_schema().model_json_schema()
            == chain.get_output_schema().model_json_schema())
    assert fast.InputType == chain.InputType and fast.OutputType == chain.OutputType
    assert "CompiledRunnable(" in repr(fast)


def test_it_composes_with_pipe_and_inside_parallel_like_the_source(chain, fast):
    upper = RunnableLambda(lambda text: text.upper())
    assert (fast | upper).invoke(QUESTION) == (chain | upper).invoke(QUESTION)
    both = RunnableParallel(answer=fast, question=RunnableLambda(lambda d: d["question"]))
    want = RunnableParallel(answer=chain, question=RunnableLambda(lambda d: d["question"]))
    assert both.invoke(QUESTION) == want.invoke(QUESTION)


async def test_async_composition_and_batch_through_a_binding(chain, fast):
    upper = RunnableLambda(lambda text: text.upper())
    assert await (fast | upper).ainvoke(QUESTION) == await (chain | upper).ainvoke(QUESTION)
    bound = fast.with_config(max_concurrency=1)
    assert await bound.abatch([QUESTION, QUESTION]) == [chain.invoke(QUESTION)] * 2


def test_with_config_names_the_root_run_and_reaches_its_callbacks(fast):
    runs = Runs()
    fast.with_config(run_name="qa", callbacks=[runs]).invoke(QUESTION)
    assert runs.started[0] == "qa" and runs.ended == len(runs.started) > 1


async def test_astream_events_sees_the_root_run_and_the_model_inside(chain, fast):
    events = [e async for e in fast.astream_events(QUESTION, version="v2")]
    kinds = [e["event"] for e in events]
    assert kinds[0] == "on_chain_start" and events[0]["name"] == chain.get_name()
    assert kinds[-1] == "on_chain_end"
    assert events[-1]["data"]["output"] == chain.invoke(QUESTION)
    assert "on_chat_model_start" in kinds and "on_chat_model_end" in kinds


def test_stream_and_retry_come_from_langchain(chain, fast):
    assert list(fast.stream(QUESTION)) == [chain.invoke(QUESTION)]
    assert fast.with_retry(stop_after_attempt=2).invoke(QUESTION) == chain.invoke(QUESTION)


def test_a_chain_holding_a_compiled_chain_compiles_again(chain, fast):
    outer = fast | RunnableLambda(len)
    again = compile(outer)
    assert isinstance(again, CompiledRunnable)
    assert again.invoke(QUESTION) == len(chain.invoke(QUESTION))


def test_errors_raise_as_the_sources_do(fast):
    with pytest.raises(KeyError):
        fast.invoke({"not the question": 1})
    assert fast.batch([{"bad": 1}, QUESTION], return_exceptions=True)[0].__class__ is KeyError
