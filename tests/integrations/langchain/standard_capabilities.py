"""What ChatAgentRT declares to LangChain's standard suites (shared by unit and integration)."""

from __future__ import annotations

from langchain_agentrt import ChatAgentRT


class ChatAgentRTCapabilities:
    """Mixin for ``ChatModelUnitTests`` / ``ChatModelIntegrationTests`` subclasses."""

    @property
    def chat_model_class(self) -> type[ChatAgentRT]:
        return ChatAgentRT

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

    @property
    def supports_model_override(self) -> bool:
        return False
