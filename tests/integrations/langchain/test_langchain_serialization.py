"""ChatAgentRT as LangChain serializes it (``langchain_core.load``): what tracers receive in
``serialized["kwargs"]``, what ``dumps`` / ``loads`` rebuild, and what never leaves the object
(the engine or backend it runs on, an API key)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.load import dumpd, dumps, load, loads

from langchain_agentrt import ChatAgentRT

QUESTION = "What is the capital of France?"
SECRET = "sk-never-in-clear"
#: A small shared engine of the default model (its own key in the shared-engine registry).
ROUND_TRIP_ENGINE = {"dtype": "float32", "kv_cache_gb": 0.25}


def _load(serialized: dict, **kwargs):
    return load(serialized, valid_namespaces=["langchain_agentrt"],
                allowed_objects=[ChatAgentRT], **kwargs)


class StartRecorder(BaseCallbackHandler):
    def __init__(self) -> None:
        self.serialized: list[dict] = []

    def on_chat_model_start(self, serialized, messages, **kwargs) -> None:
        self.serialized.append(serialized)


def test_dumpd_is_the_constructor_kwargs_without_a_key():
    llm = ChatAgentRT(model="/models/some-model", temperature=0.5, max_tokens=7, top_k=3,
                      stop=["\n"], chat_template_kwargs={"enable_thinking": False},
                      engine_kwargs={"kv_cache_gb": 0.5}, api_key=SECRET)
    serialized = dumpd(llm)
    assert serialized["type"] == "constructor"
    assert serialized["id"] == ["langchain_agentrt", "chat_models", "ChatAgentRT"]
    assert serialized["kwargs"] == {
        "model_name": "/models/some-model", "temperature": 0.5, "max_tokens": 7, "top_k": 3,
        "top_p": 1.0, "constrained": True, "stop": ["\n"],
        "chat_template_kwargs": {"enable_thinking": False}, "engine_kwargs": {"kv_cache_gb": 0.5}}
    assert SECRET not in dumps(llm)


def test_dumpd_names_the_default_model_and_greedy_explicitly(monkeypatch):
    """``model_name=None`` (the embedded default) and ``temperature`` are always written: a
    loader whose ``$AGENTRT_MODEL`` differs must not load another model."""
    monkeypatch.delenv("AGENTRT_MODEL", raising=False)
    serialized = dumpd(ChatAgentRT())
    assert serialized["kwargs"] == {"model_name": None, "temperature": 0.0, "top_p": 1.0,
                                    "constrained": True}
    monkeypatch.setenv("AGENTRT_MODEL", "/models/other")
    assert _load(serialized).model_name is None


def test_loads_rebuilds_an_equal_model_that_answers():
    llm = ChatAgentRT(model=None, engine_kwargs=ROUND_TRIP_ENGINE, max_tokens=4,
                      top_p=0.9, stop=["\n\n"], chat_template_kwargs={"unused": 1})
    loaded = loads(dumps(llm), valid_namespaces=["langchain_agentrt"],
                   allowed_objects=[ChatAgentRT])
    assert type(loaded) is ChatAgentRT and loaded is not llm
    assert loaded.model_dump() == llm.model_dump()
    try:
        answer = loaded.invoke(QUESTION)
        assert answer.content
        assert answer.usage_metadata["output_tokens"] <= 4
    finally:
        loaded.get_backend().engine.close()


def test_an_engine_model_dumps_the_engine_as_not_serializable(engine):
    """A model built on ``engine=`` writes the engine's model as ``model_name`` and the engine
    as LangChain's ``not_implemented``: loading refuses it by name, unless asked to ignore
    it (then the shared engine of the same model runs)."""
    llm = ChatAgentRT(model="/models/not-this-one", engine=engine, max_tokens=5)
    serialized = dumpd(llm)
    kwargs = serialized["kwargs"]
    assert kwargs["model_name"] == engine.config.model
    assert kwargs["engine"]["type"] == "not_implemented"
    assert kwargs["engine"]["id"][-1] == "Engine"
    assert kwargs["max_tokens"] == 5
    with pytest.raises(NotImplementedError, match="Engine"):
        _load(serialized)
    loaded = _load(serialized, ignore_unserializable_fields=True)
    assert loaded.engine is None and loaded.model_name == engine.config.model
    assert loaded.max_tokens == 5


def test_a_backend_model_dumps_the_backend_as_not_serializable():
    llm = ChatAgentRT(backend=SimpleNamespace(model_name="served"), max_tokens=5)
    kwargs = dumpd(llm)["kwargs"]
    assert kwargs["backend"]["type"] == "not_implemented"
    with pytest.raises(NotImplementedError, match="SimpleNamespace"):
        _load(dumpd(llm))


def test_the_cache_key_keeps_the_model_a_backend_serves():
    """The serialized form leaves the backend out; two backends serving different models must
    still key the LLM cache apart."""
    first = ChatAgentRT(backend=SimpleNamespace(model_name="model-a"), max_tokens=5)
    second = ChatAgentRT(backend=SimpleNamespace(model_name="model-b"), max_tokens=5)
    assert first._get_llm_string() != second._get_llm_string()


def test_a_callback_receives_the_models_parameters(engine):
    recorder = StartRecorder()
    llm = ChatAgentRT(engine=engine, temperature=0.0, max_tokens=3, top_k=5)
    llm.invoke(QUESTION, config={"callbacks": [recorder]})
    [serialized] = recorder.serialized
    kwargs = serialized["kwargs"]
    assert kwargs["temperature"] == 0.0 and kwargs["max_tokens"] == 3 and kwargs["top_k"] == 5
    json.dumps(serialized)  # what a tracer sends is JSON


def test_a_copy_serializes_its_own_options(engine):
    """LangChain caches an instance's serialized form: a ``model_copy`` with other options
    (after the original ran) must not carry the original's."""
    llm = ChatAgentRT(engine=engine, max_tokens=3)
    llm.invoke(QUESTION)
    recorder = StartRecorder()
    llm.model_copy(update={"max_tokens": 2}).invoke(QUESTION, config={"callbacks": [recorder]})
    assert recorder.serialized[0]["kwargs"]["max_tokens"] == 2
    llm.max_tokens = 1
    assert dumpd(llm)["kwargs"]["max_tokens"] == llm._serialized["kwargs"]["max_tokens"] == 1
