"""Streaming parsers, one per output syntax, behind a registry.

``create_parser("fenced_code" | "json_toolcall" | "llama3_json" | "mistral_json" |
"mistral_args" | "qwen_xml" | "react")``
builds one; every parser takes text or bytes chunks through
:meth:`~agentrt.agent.parsers.base.BaseStreamParser.feed` and reports the tool-call events
(:mod:`agentrt.agent.parsers.base`) those chunks complete. :func:`stream_parser` builds the one
partial execution reads a model's output with (the tools start on its events).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
    "stream_parser",
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


def stream_parser(name: str, *, tools: Sequence[Mapping[str, Any]] = ()) -> BaseStreamParser:
    """The parser of syntax ``name`` that starts tools while the model writes: JSON calls read
    strictly (valid JSON that is no valid call is a ``ParseError`` as it is written, never a
    started tool); XML parameter values (Qwen3-Coder) typed by ``tools``' JSON schemas (OpenAI
    tool dicts, e.g. ``Tool.spec()``) exactly as the chat layer's final parse types them, a
    string parameter streamed as ``delta`` pieces."""
    from agentrt.agent.parsers.json_toolcall import JsonToolCallParser
    from agentrt.agent.parsers.qwen_xml import QwenXmlToolCallParser, tool_schemas

    parser_cls = PARSERS.get(name)
    if issubclass(parser_cls, JsonToolCallParser):
        return create_parser(name, is_strict=True)
    if issubclass(parser_cls, QwenXmlToolCallParser):
        return create_parser(name, schemas=tool_schemas(tools))
    return create_parser(name)
