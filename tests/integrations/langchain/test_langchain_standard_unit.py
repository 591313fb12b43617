"""LangChain's standard unit suite for ChatAgentRT (no model is loaded: engines are lazy)."""

from __future__ import annotations

import pytest

pytest.importorskip("langchain_tests", reason="needs the [dev] extra (langchain-tests)")

from langchain_tests.unit_tests import ChatModelUnitTests  # noqa: E402
from standard_capabilities import ChatAgentRTCapabilities  # noqa: E402


class TestChatAgentRTUnit(ChatAgentRTCapabilities, ChatModelUnitTests):
    @property
    def chat_model_params(self) -> dict:
        return {"constrained": True}

    @property
    def init_from_env_params(self) -> tuple[dict, dict, dict]:
        return {"AGENTRT_MODEL": "/models/Qwen3-0.6B"}, {}, {"model_name": "/models/Qwen3-0.6B"}

