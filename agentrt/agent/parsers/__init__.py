"""Streaming parsers, one per output syntax, behind a registry.

``create_parser("fenced_code" | "json_toolcall" | "llama3_json" | "mistral_json" |
"mistral_args" | "qwen_xml" | "react")``
builds one; every parser takes text or bytes chunks through
:meth:`~agentrt.agent.parsers.base.BaseStreamParser.feed` and reports the tool-call events
(:mod:`agentrt.agent.parsers.base`) those chunks complete.
"""

from __future__ import annotations

from typing import Any

from agentrt.agent.parsers.base import (
    BaseStreamParser,
    CallEnd,
    CallStart,
    Event,
    FinalAnswer,
    ParseError,
    Piece,
    ToolName,
)
from agentrt.core.registry import Registry

__all__ = [
    "PARSERS",
    "BaseStreamParser",
    "CallEnd",
    "CallStart",
    "Event",
    "FinalAnswer",
    "ParseError",
    "Piece",
    "ToolName",
    "create_parser",
]

PARSERS: Registry[type[BaseStreamParser]] = Registry(
    "parser",
    {
        "fenced_code": "agentrt.agent.parsers.fenced_code:FencedCodeParser",
        "json_toolcall": "agentrt.agent.parsers.json_toolcall:JsonToolCallParser",
        "llama3_json": "agentrt.agent.parsers.json_toolcall:Llama3ToolCallParser",
        "mistral_json": "agentrt.agent.parsers.json_toolcall:MistralToolCallParser",
        "mistral_args": "agentrt.agent.parsers.mistral_args:MistralArgsToolCallParser",
        "qwen_xml": "agentrt.agent.parsers.qwen_xml:QwenXmlToolCallParser",
        "react": "agentrt.agent.parsers.react:ReActParser",
    },
)


def create_parser(name: str, **kwargs: Any) -> BaseStreamParser:
    """A new parser of the registered syntax ``name``."""
    return PARSERS.create(name, **kwargs)
