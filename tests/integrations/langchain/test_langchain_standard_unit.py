"""LangChain's standard unit suite for ChatAgentRT (no model is loaded: engines are lazy)."""

from __future__ import annotations

import pytest

pytest.importorskip("langchain_tests", reason="needs the [dev] extra (langchain-tests)")

from langchain_tests.unit_tests import ChatModelUnitTests  # noqa: E402

from langchain_agentrt import ChatAgentRT  # noqa: E402


class TestChatAgentRTUnit(ChatModelUnitTests):
    @property
    def chat_model_class(self) -> type[ChatAgentRT]:
        return ChatAgentRT

    @property
    def chat_model_params(self) -> dict:
        return {"constrained": True}

    @property
    def init_from_env_params(self) -> tuple[dict, dict, dict]:
        return {"AGENTRT_MODEL": "/models/Qwen3-0.6B"}, {}, {"model_name": "/models/Qwen3-0.6B"}

    @property
    def has_tool_calling(self) -> bool:
        return True

    @property
    def has_tool_choice(self) -> bool:
        return True

    @property
    def has_structured_output(self) -> bool:
        return True

    @property
    def supports_json_mode(self) -> bool:
        return True

    @property
    def returns_usage_metadata(self) -> bool:
        return True

    @property
    def supports_image_inputs(self) -> bool:
        return False
