"""LangChain integration of agentrt: ``ChatAgentRT``, a chat model on agentrt's own engine.

>>> from langchain_agentrt import ChatAgentRT
>>> ChatAgentRT(max_tokens=32).invoke("Hello!")

Module map: ``chat_models`` (the model) · ``generation`` (one call: LangChain options →
:mod:`agentrt.chat` → message/chunks) · ``messages`` (LangChain messages → OpenAI-format
dicts) · ``structured`` (JSON response formats) · ``executor`` (``agentrt.Executor``) ·
``react`` (the ReAct grammar) · ``partial`` (tools that start while the call is written) ·
``tools`` (agentrt tools as LangChain tools and back) · ``middleware`` (sessions and the
repeat guard for ``create_agent``) · ``repeats`` (the repeat guard).
Templates, tool-call parsing, grammars and the shared engine are in :mod:`agentrt.chat`.
"""

from __future__ import annotations

from agentrt.chat import get_shared_engine
from langchain_agentrt.chat_models import ChatAgentRT
from langchain_agentrt.tools import from_langchain, to_langchain

__all__ = ["AgentRTMiddleware", "ChatAgentRT", "from_langchain", "get_shared_engine",
           "to_langchain"]


def __getattr__(name: str):
    """``AgentRTMiddleware`` (sessions for ``create_agent``), imported on first use: it
    needs ``langchain`` 1.x (the ``[agent]`` extra), the rest only ``langchain-core``."""
    if name == "AgentRTMiddleware":
        from langchain_agentrt.middleware import AgentRTMiddleware

        return AgentRTMiddleware
    raise AttributeError(f"module 'langchain_agentrt' has no attribute {name!r}")
