"""ChatAgentRT options a LangChain user carries over from ``ChatOpenAI``: the LLM cache's key,
``max_completion_tokens``, ``input_token_details``, ``json_mode`` without a schema (the real
model)."""

from __future__ import annotations

import pytest
from langchain_core.caches import InMemoryCache
from langchain_core.globals import set_llm_cache

from langchain_agentrt import ChatAgentRT

QUESTION = "What is the capital of France?"


@pytest.fixture
def global_cache():
    """``set_llm_cache(InMemoryCache())`` for one test."""
    cache = InMemoryCache()
    set_llm_cache(cache)
    yield cache
    set_llm_cache(None)


def test_the_llm_cache_serves_a_repeat_and_keys_on_every_output_option(engine, global_cache):
    """Two models differing only in ``logprobs`` or ``chat_template_kwargs`` shared one cache
    key: the second got the first's answer (without the logprobs it asked for)."""
    plain = ChatAgentRT(engine=engine, max_tokens=6)
    first = plain.invoke(QUESTION)
    assert plain.invoke(QUESTION).content == first.content
    assert len(global_cache._cache) == 1  # the repeat was served from the cache
    plain.invoke(QUESTION, temperature=0.5, seed=1)
    assert len(global_cache._cache) == 2
    scored = ChatAgentRT(engine=engine, max_tokens=6, logprobs=True).invoke(QUESTION)
    assert len(scored.response_metadata["logprobs"]["content"]) == (
        scored.usage_metadata["output_tokens"])
    ChatAgentRT(engine=engine, max_tokens=6, chat_template_kwargs={"x": 1}).invoke(QUESTION)
    assert len(global_cache._cache) == 4
    ChatAgentRT(engine=engine, max_tokens=6, cache=False).invoke(QUESTION)
    assert len(global_cache._cache) == 4


def test_max_completion_tokens_is_max_tokens_as_in_chatopenai(engine, llm):
    assert ChatAgentRT(engine=engine, max_completion_tokens=3).max_tokens == 3
    assert ChatAgentRT(engine=engine, max_tokens=3).max_tokens == 3
    assert ChatAgentRT(engine=engine, max_completion_tokens=3).invoke(QUESTION).usage_metadata[
        "output_tokens"] == 3
    assert llm.invoke(QUESTION, max_completion_tokens=2).usage_metadata["output_tokens"] == 2
    with pytest.raises(ValueError, match="max_tokens=2 and max_completion_tokens=3"):
        llm.invoke(QUESTION, max_tokens=2, max_completion_tokens=3)
    # LangSmith's tracing metadata names the limit given under either name
    assert llm._get_ls_params(max_completion_tokens=2)["ls_max_tokens"] == 2


def test_usage_reports_the_prompt_tokens_read_from_the_prefix_cache(llm):
    """``input_token_details["cache_read"]`` (ChatOpenAI's ``cached_tokens``) was missing,
    though the engine served the repeated prompt from its prefix cache (the server reports
    it)."""
    llm.invoke(QUESTION)
    usage = llm.invoke(QUESTION).usage_metadata
    cached = usage["input_token_details"]["cache_read"]
    assert 0 < cached <= usage["input_tokens"]
    chunks = list(llm.stream(QUESTION))
    assert chunks[-1].usage_metadata["input_token_details"]["cache_read"] > 0
    assert not any(c.usage_metadata for c in chunks[:-1])


def test_json_mode_takes_no_schema_as_in_chatopenai(llm):
    """``with_structured_output(None, method="json_mode")`` (ChatOpenAI's documented form)
    raised "Unsupported function None"."""
    answer = llm.with_structured_output(None, method="json_mode", include_raw=True).invoke(
        'Reply with a JSON object with one key "city": the capital of France.', max_tokens=48)
    assert answer["parsing_error"] is None and answer["parsed"] == {"city": "Paris"}
    with pytest.raises(ValueError, match="schema=None needs method='json_mode'"):
        llm.with_structured_output(None)
