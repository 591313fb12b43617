"""ChatAgentRT where LangChain code leans on the BaseChatModel contract beyond the standard
suites: token counting, ``llm_output``, cache keys, stop forms, copies, options, structured
output cut off (the real model)."""

from __future__ import annotations

import copy
import pickle

import pytest
from langchain_core.caches import InMemoryCache
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.exceptions import OutputParserException
from langchain_core.messages import HumanMessage, SystemMessage, trim_messages
from langchain_core.tools import tool
from pydantic import BaseModel, ValidationError

from langchain_agentrt import ChatAgentRT

QUESTION = "What is the capital of France?"


@tool
def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    return f"Sunny in {city}."


class EndRecorder(BaseCallbackHandler):
    def __init__(self) -> None:
        self.outputs: list[dict | None] = []

    def on_llm_end(self, response, **kwargs) -> None:
        self.outputs.append(response.llm_output)


def test_token_counts_are_the_models_prompt(llm, engine):
    assert llm.get_token_ids("Hello world") == engine.tokenizer.encode(
        "Hello world", add_special_tokens=False)
    messages = [SystemMessage("Answer briefly."), HumanMessage(QUESTION)]
    used = llm.invoke(messages, max_tokens=1).usage_metadata["input_tokens"]
    assert llm.get_num_tokens_from_messages(messages) == used
    with_tools = llm.bind_tools([get_weather]).invoke(messages, max_tokens=1)
    assert llm.get_num_tokens_from_messages(messages, tools=[get_weather]) == (
        with_tools.usage_metadata["input_tokens"]) > used
    assert llm.get_num_tokens_from_messages([]) == 0
    history = [HumanMessage(f"Question {i}: what is {i} plus {i}?") for i in range(20)]
    trimmed = trim_messages(history, max_tokens=60, token_counter=llm, strategy="last")
    assert 0 < len(trimmed) < len(history) and trimmed[-1] is history[-1]
    assert llm.get_num_tokens_from_messages(trimmed) <= 60


def test_llm_output_carries_usage_and_model_for_on_llm_end(llm):
    recorder = EndRecorder()
    message = llm.invoke(QUESTION, config={"callbacks": [recorder]})
    usage = message.usage_metadata
    expected = {"token_usage": {"prompt_tokens": usage["input_tokens"],
                                "completion_tokens": usage["output_tokens"],
                                "total_tokens": usage["total_tokens"]},
                "model_name": llm.resolved_model_name}
    assert recorder.outputs == [expected]
    chunks = list(llm.stream(QUESTION))
    streamed = sum(chunks[1:], chunks[0])
    assert streamed.response_metadata == message.response_metadata  # token_usage in both
    assert message.response_metadata["token_usage"] == expected["token_usage"]
    both = llm.generate([[HumanMessage(QUESTION)], [HumanMessage(QUESTION)]])
    assert both.llm_output["token_usage"] == {
        k: 2 * v for k, v in expected["token_usage"].items()}


def test_cache_keys_on_the_models_stop_strings(engine):
    cache = InMemoryCache()
    full = ChatAgentRT(engine=engine, max_tokens=12, cache=cache).invoke(QUESTION).content
    cut = ChatAgentRT(engine=engine, max_tokens=12, stop=["Paris"], cache=cache).invoke(QUESTION)
    assert "Paris" in full and cut.content == full[: full.index("Paris")]


def test_one_stop_string_and_stream_usage_as_openai_takes_them(llm):
    cut = llm.invoke(QUESTION, stop=["Paris"]).content
    assert cut and llm.invoke(QUESTION, stop="Paris").content == cut
    chunks = list(llm.stream(QUESTION, stream_usage=True))
    assert chunks[-1].usage_metadata["output_tokens"] > 0


def test_deep_copy_shares_the_engine_and_pickling_it_is_a_clear_error(llm):
    twin = copy.deepcopy(llm)
    assert twin.engine is llm.engine and twin is not llm
    assert twin.invoke(QUESTION).content == llm.invoke(QUESTION).content
    with pytest.raises(TypeError, match="engine= or backend= cannot be pickled"):
        pickle.dumps(llm)
    portable = pickle.loads(pickle.dumps(ChatAgentRT(model="m", max_tokens=3, stop=["x"])))
    assert (portable.model_name, portable.max_tokens, portable.stop) == ("m", 3, ["x"])


def test_a_misspelt_option_is_an_error_not_ignored():
    with pytest.raises(ValidationError, match="max_token\n"):
        ChatAgentRT(max_token=8)
    assert ChatAgentRT(model="m", stop_sequences=["x"]).stop == ["x"]  # aliases still work


def test_a_call_option_given_as_none_is_the_models_own(llm, engine):
    expected = llm.invoke(QUESTION).content
    for option in ("temperature", "top_p", "top_k", "max_tokens", "seed"):
        assert llm.invoke(QUESTION, **{option: None}).content == expected, option
    slow = ChatAgentRT(engine=engine, max_tokens=200, timeout=0.3)
    with pytest.raises(TimeoutError, match="timeout=0.3"):
        slow.invoke("Write a long story about a cat.", timeout=None)


class Capital(BaseModel):
    """A country's capital."""

    country: str
    city: str


@pytest.mark.parametrize("method", ["function_calling", "json_schema"])
@pytest.mark.parametrize("schema", [Capital, Capital.model_json_schema()], ids=["pydantic", "json"])
def test_a_cut_off_structured_answer_is_a_parsing_error(engine, llm, schema, method):
    short = ChatAgentRT(engine=engine, max_tokens=5)  # ends inside the call or the JSON
    answer = short.with_structured_output(schema, method=method, include_raw=True
                                          ).invoke(QUESTION)
    assert answer["parsed"] is None and answer["raw"].response_metadata["finish_reason"] == (
        "length")
    assert isinstance(answer["parsing_error"], OutputParserException)
    with pytest.raises(OutputParserException, match="did not parse|not complete JSON"):
        short.with_structured_output(schema, method=method).invoke(QUESTION)
    structured = llm.with_structured_output(schema, method=method)
    whole = structured.invoke(QUESTION, max_tokens=48)
    assert (whole.city if schema is Capital else whole["city"]) == "Paris"
    partials = list(structured.stream(QUESTION, max_tokens=48))
    assert partials[-1] == whole and (schema is Capital or len(partials) > 1)  # dicts grow
