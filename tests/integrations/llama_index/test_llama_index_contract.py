"""AgentRT and AgentRTEmbedding as a LlamaIndex user relies on them: copies and pickles,
constructor checks, one callback / instrumentation event per call, streamed structured output,
tool calls with no or nested arguments, the embeddings' batch contract."""

# NOTE: no `from __future__ import annotations`: FunctionTool reads ship's annotations as types

import asyncio
import copy
import pickle

import numpy as np
import pytest
from llama_index.core.agent.workflow import FunctionAgent, ToolCallResult
from llama_index.core.callbacks import CallbackManager, TokenCountingHandler
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.llms import ChatMessage
from llama_index.core.prompts import PromptTemplate
from llama_index.core.tools import FunctionTool
from llama_index.llms.agentrt import AgentRT
from pydantic import BaseModel, ValidationError

from agentrt.chat import render_prompt

QUESTION = "What is the capital of France?"
MESSAGES = [ChatMessage(role="user", content=QUESTION)]


class City(BaseModel):
    name: str
    country: str


class Address(BaseModel):
    city: str
    zip_code: str


def ship(item: str, address: Address) -> str:
    """Ship an item to an address."""
    return f"shipped {item} to {address}"


def current_time() -> str:
    """Get the current time."""
    return "12:00"


# --- copies, pickles, constructor -------------------------------------------------------------
def test_deepcopy_shares_the_engine(llm, engine):
    """copy.deepcopy / model_copy(deep=True) (LlamaIndex copies components) share the engine,
    a running resource; they were a ctypes pickling error."""
    for clone in (copy.deepcopy(llm), llm.model_copy(deep=True)):
        assert clone is not llm and clone.engine is engine
        assert clone.complete(QUESTION).text == llm.complete(QUESTION).text


def test_pickling_an_engine_bound_llm_is_an_error_that_leaves_it_working(llm, engine):
    """LlamaIndex's pickling drops what it cannot pickle from the *original's* state: the
    engine went, and every later call of the original failed (no attribute 'engine')."""
    with pytest.raises(TypeError, match="model="):
        pickle.dumps(llm)
    assert llm.engine is engine and llm.complete(QUESTION, max_tokens=2).text


def test_pickling_a_model_llm_round_trips_and_keeps_the_original():
    odd = AgentRT(max_tokens=8, stop=["\n"], messages_to_prompt=lambda ms: "x")
    clone = pickle.loads(pickle.dumps(odd))
    assert (clone.max_tokens, clone.stop, clone.model) == (8, ["\n"], odd.model)
    assert odd.messages_to_prompt([]) == "x"  # NOTE: not stripped from the original


def test_unknown_constructor_argument_is_an_error(engine):
    from llama_index.embeddings.agentrt import AgentRTEmbedding

    with pytest.raises(ValidationError, match="max_token"):
        AgentRT(engine=engine, max_token=8)
    with pytest.raises(ValidationError, match="embed_batch_sze"):
        AgentRTEmbedding(embed_batch_sze=8)
    model = AgentRT(max_tokens=8, temperature=0.5)
    assert AgentRT.from_dict(model.to_dict()).to_dict() == model.to_dict()
    assert AgentRT.from_json(model.to_json()).max_tokens == 8


def test_stop_as_one_string(llm, engine):
    """A stop string given as one str, in the constructor (a ValidationError) or per call."""
    stopped = AgentRT(engine=engine, max_tokens=24, stop="Paris")
    assert stopped.stop == ["Paris"]
    text = stopped.complete(QUESTION).text
    assert "Paris" not in text and llm.complete(QUESTION).text.startswith(text)
    assert llm.complete(QUESTION, stop="Paris").text == text


def test_bad_per_call_options_are_clear_errors(llm):
    for bad in ({"max_tokens": 0}, {"max_tokens": -1}, {"temperature": -1.0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            llm.chat(MESSAGES, **bad)
    assert llm.chat(MESSAGES, max_tokens=None, temperature=None).message.content


def test_formatted_prompt_is_the_models_input_as_written(llm, engine):
    """complete(prompt, formatted=True) (Ollama's raw mode): the prompt was put in a user
    message of the chat template a second time, its special tokens' texts split."""
    prompt = render_prompt(engine.tokenizer, [{"role": "user", "content": QUESTION}])
    raw = llm.complete(prompt, formatted=True)
    chat = llm.complete(QUESTION)
    assert raw.text == chat.text and raw.raw["usage"] == chat.raw["usage"]
    streamed = list(llm.stream_complete(prompt, formatted=True))
    assert "".join(c.delta for c in streamed) == streamed[-1].text == chat.text
    assert asyncio.run(llm.acomplete(prompt, formatted=True)).text == chat.text


def test_a_stop_that_is_not_a_string_is_a_value_error(llm):
    with pytest.raises(ValueError, match="stop"):
        llm.complete(QUESTION, stop=[1])


# --- callbacks and instrumentation ------------------------------------------------------------
class _Recorder(BaseEventHandler):
    names: list[str] = []

    def handle(self, event, **kwargs) -> None:
        self.names.append(type(event).__name__)


@pytest.fixture
def recorded():
    recorder = _Recorder(names=[])
    dispatcher = get_dispatcher()
    dispatcher.add_event_handler(recorder)
    yield recorder.names
    dispatcher.event_handlers.remove(recorder)


async def _all_four_completions(llm: AgentRT) -> list[str]:
    texts = [llm.complete(QUESTION).text, (await llm.acomplete(QUESTION)).text]
    texts.append(list(llm.stream_complete(QUESTION))[-1].text)
    texts.append([c async for c in await llm.astream_complete(QUESTION)][-1].text)
    return texts


def test_a_completion_is_one_llm_event(engine, recorded):
    """complete and its twins fire completion events only; they also fired chat events (the
    completion ran through the decorated chat), so TokenCountingHandler counted every
    completion's tokens twice."""
    counter = TokenCountingHandler()
    llm = AgentRT(engine=engine, max_tokens=8, callback_manager=CallbackManager([counter]))
    texts = asyncio.run(_all_four_completions(llm))
    assert len(set(texts)) == 1
    usage = llm.complete(QUESTION).raw["usage"]
    assert [(e.prompt_token_count, e.completion_token_count) for e in counter.llm_token_counts] \
        == [(usage["prompt_tokens"], usage["completion_tokens"])] * 5
    assert recorded.count("LLMCompletionStartEvent") == recorded.count("LLMCompletionEndEvent") == 5
    assert not [n for n in recorded if n.startswith("LLMChat")]


def test_a_chat_is_one_llm_event(engine, recorded):
    counter = TokenCountingHandler()
    llm = AgentRT(engine=engine, max_tokens=8, callback_manager=CallbackManager([counter]))
    chunks = list(llm.stream_chat(MESSAGES))
    assert llm.chat(MESSAGES).message.content == chunks[-1].message.content
    usage = chunks[-1].raw["usage"]
    assert [(e.prompt_token_count, e.completion_token_count) for e in counter.llm_token_counts] \
        == [(usage["prompt_tokens"], usage["completion_tokens"])] * 2
    assert recorded.count("LLMChatStartEvent") == recorded.count("LLMChatEndEvent") == 2
    assert recorded.count("LLMChatInProgressEvent") == len(chunks)
    assert not [n for n in recorded if n.startswith("LLMCompletion")]


# --- structured output ------------------------------------------------------------------------
def test_streamed_structured_output_ends_with_the_whole_object(tool_llm):
    """LlamaIndex's streamed structured program leaves tool_required out of its call: the
    model answered in prose and the stream ended with an empty object."""
    prompt = PromptTemplate("Describe the city {name}.")
    whole = tool_llm.structured_predict(City, prompt, name="Paris")
    last = list(tool_llm.stream_structured_predict(City, prompt, name="Paris"))[-1]
    assert City.model_validate(last.model_dump()) == whole

    async def streamed():
        parts = await tool_llm.astream_structured_predict(City, prompt, name="Paris")
        return [p async for p in parts][-1]

    assert City.model_validate(asyncio.run(streamed()).model_dump()) == whole
    chat = [ChatMessage(role="user", content="Describe the city Paris.")]
    streamed_chat = list(tool_llm.as_structured_llm(City).stream_chat(chat))
    assert City.model_validate_json(streamed_chat[-1].message.content) == whole


def test_truncated_structured_output_is_an_error_not_an_object(engine):
    prompt = PromptTemplate("Describe the city {name}.")
    with pytest.raises(ValueError, match="truncated tool call"):
        AgentRT(engine=engine, max_tokens=6).structured_predict(City, prompt, name="Paris")


# --- tools ------------------------------------------------------------------------------------
def test_tools_without_arguments_and_with_nested_ones(tool_llm):
    clock, shipping = FunctionTool.from_defaults(current_time), FunctionTool.from_defaults(ship)
    (call,) = tool_llm.get_tool_calls_from_response(
        tool_llm.chat_with_tools([clock], user_msg="What time is it?", tool_required=True))
    assert (call.tool_name, call.tool_kwargs) == ("current_time", {})
    out = tool_llm.predict_and_call([shipping], user_msg="Ship a book to Paris, 75001.",
                                    tool_required=True)
    assert out.sources[0].tool_name == "ship" and not out.sources[0].is_error
    Address.model_validate(out.sources[0].raw_input["kwargs"]["address"])
    answer = tool_llm.chat_with_tools([clock], user_msg="Hi!", tool_choice="none")
    assert tool_llm.get_tool_calls_from_response(answer, error_on_no_tool_call=False) == []
    with pytest.raises(ValueError, match="0 tool calls"):
        tool_llm.get_tool_calls_from_response(answer)


def multiply(a: int, b: int) -> int:
    """Multiply two integers and return the product."""
    return a * b


async def _tool_results(agent, question: str) -> list[tuple[str, dict, str]]:
    handler = agent.run(user_msg=question)
    results = [(e.tool_name, e.tool_kwargs, str(e.tool_output))
               async for e in handler.stream_events() if isinstance(e, ToolCallResult)]
    await handler
    return results


def test_function_agent_runs_a_function_tool(tool_llm):
    agent = FunctionAgent(tools=[FunctionTool.from_defaults(multiply)], llm=tool_llm,
                          initial_tool_choice="multiply")
    results = asyncio.run(_tool_results(agent, "What is 6 times 7?"))
    assert results[0] == ("multiply", {"a": 6, "b": 7}, "42")


# --- embeddings -------------------------------------------------------------------------------
def test_embeddings_batch_contract():
    from llama_index.embeddings.agentrt import AgentRTEmbedding

    embed = AgentRTEmbedding(embed_batch_size=8)
    texts = [f"note number {i}" for i in range(37)] + [""]
    vectors = embed.get_text_embedding_batch(texts)
    assert len(vectors) == len(texts) and {len(v) for v in vectors} == {384}
    assert np.allclose(asyncio.run(embed.aget_text_embedding_batch(texts)), vectors)
    assert np.allclose(embed.get_text_embedding(texts[5]), vectors[5], atol=1e-5)
    assert np.allclose(embed.get_query_embedding(texts[5]), vectors[5], atol=1e-5)
    clone = copy.deepcopy(embed)
    assert clone.embedder is embed.embedder and clone.embed_batch_size == 8


def test_embeddings_refuse_a_model_they_do_not_run():
    """model_name="BAAI/bge-small-en-v1.5" silently ran all-MiniLM-L6-v2."""
    from llama_index.embeddings.agentrt import AgentRTEmbedding

    from agentrt_tools.rag import Embedder

    with pytest.raises(ValueError, match="bge-small"):
        AgentRTEmbedding(model_name="BAAI/bge-small-en-v1.5")
    embedder = Embedder.load()
    assert AgentRTEmbedding(embedder=embedder).model_name == embedder.name
    assert AgentRTEmbedding.from_dict(AgentRTEmbedding().to_dict()).model_name == embedder.name
