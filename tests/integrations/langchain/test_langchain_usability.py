"""Usability of ChatAgentRT: a misspelt call option is refused before the engine loads, with
the closest option named; an async deadline fires while the engine loads; structured output
defaults to ``json_schema`` (ChatOpenAI's default), which answers the question right."""

from __future__ import annotations

import asyncio
import time

import pytest
from pydantic import BaseModel

from langchain_agentrt import ChatAgentRT


def test_a_misspelt_call_option_is_refused_before_the_engine_loads():
    llm = ChatAgentRT(model="/nonexistent/model.gguf")  # loading it would fail: not reached
    with pytest.raises(ValueError, match=r"'max_token' \(did you mean 'max_tokens'\?\)"):
        llm.invoke("Hi", max_token=3)
    with pytest.raises(ValueError, match="'foo'"):
        asyncio.run(llm.ainvoke("Hi", foo=1))


class _SlowLoad(ChatAgentRT):
    def get_backend(self):
        time.sleep(3)  # NOTE: an engine load (seconds): it must not hold the event loop
        return super().get_backend()


def test_an_async_deadline_fires_during_the_engine_load(engine):
    llm = _SlowLoad(engine=engine, max_tokens=2)

    async def main() -> float:
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(llm.ainvoke("Hi"), 0.3)
        return time.monotonic() - started

    assert asyncio.run(main()) < 2.5  # the loop was free: not after the 3 s load


class City(BaseModel):
    """A city and the country it is in."""

    name: str
    country: str


def test_structured_output_defaults_to_json_schema(engine):
    llm = ChatAgentRT(engine=engine, max_tokens=32)
    city = llm.with_structured_output(City).invoke(
        "What is the capital of France? Give the city and its country.")
    assert city.name == "Paris"  # function_calling answered name='France' here
