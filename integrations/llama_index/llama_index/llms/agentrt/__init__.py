"""LlamaIndex integration of agentrt: ``AgentRT``, an LLM on agentrt's own engine.

>>> from llama_index.llms.agentrt import AgentRT
>>> AgentRT(max_tokens=32).complete("Hello!")

Module map: ``base`` (the LLM) · ``generation`` (one call: LlamaIndex options →
:mod:`agentrt.chat` → ``ChatResponse`` s) · ``messages`` (LlamaIndex messages ↔ OpenAI-format
dicts, tool calls as ``ToolCallBlock`` s) · ``agents`` (``agent_session``: an agent run as one
engine session) · ``react`` (the ReAct grammar) · ``tools`` (agentrt tools as LlamaIndex
tools). Templates, tool-call parsing, grammars and the shared engine are in :mod:`agentrt.chat`.
"""

from __future__ import annotations

from llama_index.llms.agentrt.agents import agent_session
from llama_index.llms.agentrt.base import AgentRT
from llama_index.llms.agentrt.react import react_grammar
from llama_index.llms.agentrt.tools import AgentRTTool, to_llama_index

__all__ = ["AgentRT", "AgentRTTool", "agent_session", "react_grammar", "to_llama_index"]
