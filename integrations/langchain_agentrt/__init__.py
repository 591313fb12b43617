"""LangChain integration of agentrt: ``ChatAgentRT``, a chat model on agentrt's own engine.

>>> from langchain_agentrt import ChatAgentRT
>>> ChatAgentRT(max_tokens=32).invoke("Hello!")

Module map: ``chat_models`` (the model) · ``generation`` (one call: prompt → request →
message/chunks) · ``messages`` (LangChain messages → chat template) · ``tool_calls``
(``<tool_call>`` text ↔ tool calls, streamed) · ``grammar`` (what constrained decoding
allows) · ``structured`` (JSON response formats) · ``engines`` (the shared engine).
"""

from __future__ import annotations

from langchain_agentrt.chat_models import ChatAgentRT
from langchain_agentrt.engines import get_shared_engine

__all__ = ["ChatAgentRT", "get_shared_engine"]
