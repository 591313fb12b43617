"""LangChain's standard integration suite for ChatAgentRT, on the real SmolLM2-135M-Instruct.

Slow (two minutes on 2 CPU cores). Tests that fail because of the 135M model's ability, not
because of agentrt, are ``xfail`` with the cause (checked with ``--runxfail``):

- ``_REPEATS``: asked for a joke, greedy decoding loops ("A cat is a cat, a cat is a cat, ...")
  inside the first JSON string until ``max_tokens``; the (grammar-valid) call or JSON is cut
  off and cannot be parsed. (``test_structured_output[pydantic]`` would pass only because the
  standard test does not assert its validator's result; its output is cut off the same way.)
- ``_NO_TOOL_USE``: under ``tool_choice="auto"`` the model answers in prose and never calls
  ``get_weather`` (the same with ``constrained=False``; the model was not trained on tools).
- ``_JSON_MODE``: JSON mode allows any JSON object; the model nests ``{"setup": {"setup":
  ...}}`` instead of writing the two strings the prompt asks for.
"""

from __future__ import annotations

import pytest

pytest.importorskip("langchain_tests", reason="needs the [dev] extra (langchain-tests)")

from langchain_tests.integration_tests import ChatModelIntegrationTests  # noqa: E402
from standard_capabilities import ChatAgentRTCapabilities  # noqa: E402

pytestmark = pytest.mark.slow

# NOTE: not run (they cost a minute of decoding to max_tokens); `--runxfail` runs them.
_REPEATS = pytest.mark.xfail(reason="model ability: repeats inside the JSON string until "
                             "max_tokens (see the module docstring)", run=False)
_NO_TOOL_USE = pytest.mark.xfail(reason="model ability: never calls a tool under "
                                 "tool_choice='auto'", run=False)
_JSON_MODE = pytest.mark.xfail(reason="model ability: nests objects instead of the asked keys",
                               run=False)
_SCHEMA_TYPES = ["pydantic", "typeddict", "json_schema"]
_OUTPUT_VERSIONS = [{}, {"output_version": "v1"}]


class TestChatAgentRTIntegration(ChatAgentRTCapabilities, ChatModelIntegrationTests):
    @pytest.fixture(autouse=True)
    def _session_engine(self, engine):
        self._engine = engine  # NOTE: every ChatAgentRT the suite builds uses the session engine

    @property
    def chat_model_params(self) -> dict:
        return {"engine": self._engine, "max_tokens": 64}

    # --- failures caused by the 135M model's ability (see the module docstring) ---------------
    @_REPEATS
    @pytest.mark.parametrize("schema_type", _SCHEMA_TYPES)
    def test_structured_output(self, model, schema_type) -> None:
        super().test_structured_output(model, schema_type)

    @_REPEATS
    @pytest.mark.parametrize("schema_type", _SCHEMA_TYPES)
    async def test_structured_output_async(self, model, schema_type) -> None:
        await super().test_structured_output_async(model, schema_type)

    @_REPEATS
    def test_structured_output_pydantic_2_v1(self, model) -> None:
        super().test_structured_output_pydantic_2_v1(model)

    @_REPEATS
    def test_structured_output_optional_param(self, model) -> None:
        super().test_structured_output_optional_param(model)

    @_JSON_MODE
    def test_json_mode(self, model) -> None:
        super().test_json_mode(model)

    @_NO_TOOL_USE
    @pytest.mark.parametrize("model", _OUTPUT_VERSIONS, indirect=True)
    def test_agent_loop(self, model) -> None:
        super().test_agent_loop(model)
