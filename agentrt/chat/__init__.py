"""The chat layer every front end shares: ChatAgentRT, AgentRT and ``agentrt serve``.

OpenAI-format messages and tools go in (:mod:`.template` renders them with the model's own
chat template); :mod:`.grammar` turns ``tool_choice`` / ``response_format`` into an xgrammar
structural tag; :mod:`.call` runs the request (inside an agent run, through its session);
:mod:`.tool_calls` parses tool calls (and ``<think>`` reasoning) out of the streamed text, in
the model family's format from :mod:`.formats` (Hermes, Llama 3, Mistral). Nothing here
imports LangChain, LlamaIndex or FastAPI.
"""

from agentrt.chat.call import ChatCall, ChatProgress, arun_deltas, prepare_chat, run_deltas
from agentrt.chat.engines import get_shared_engine
from agentrt.chat.formats import FORMATS, ToolCallFormat, detect_format, get_format
from agentrt.chat.grammar import normalize_tool_choice, output_structural_tag, response_schema
from agentrt.chat.template import message_text, render_prompt, template_caps
from agentrt.chat.tool_calls import (
    CLOSE_TAG,
    OPEN_TAG,
    StreamPiece,
    ToolCallStream,
    format_tool_call,
    new_call_id,
)

__all__ = [
    "CLOSE_TAG",
    "OPEN_TAG",
    "ChatCall",
    "ChatProgress",
    "FORMATS",
    "StreamPiece",
    "ToolCallFormat",
    "ToolCallStream",
    "arun_deltas",
    "detect_format",
    "format_tool_call",
    "get_format",
    "get_shared_engine",
    "message_text",
    "new_call_id",
    "normalize_tool_choice",
    "output_structural_tag",
    "prepare_chat",
    "render_prompt",
    "response_schema",
    "run_deltas",
    "template_caps",
]
