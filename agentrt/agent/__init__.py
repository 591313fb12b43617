"""The agent layer: tool plugins with partial execution, streaming parsers, the tool sandbox.

Front door of :mod:`agentrt.agent`. Heavy or optional parts (LangChain adapters, the token-stream
adapter's tokenizer use) live in their own modules and are imported only when used.
"""

from __future__ import annotations

from agentrt.agent.parsers import PARSERS, create_parser
from agentrt.agent.plugin import (
    ArgumentInvocation,
    Invocation,
    LazyInvocation,
    Observation,
    PieceTiming,
    Tool,
    ToolCallError,
    ToolSession,
)
from agentrt.agent.runtime import TOOLS, ToolCall, ToolRuntime, create_tool
from agentrt.agent.sandbox import SandboxConfig, SandboxReport
from agentrt.agent.tool_loop import Segment, ToolRun, render_observation, run_with_tools
from agentrt.agent.tool_stream import ToolStream

__all__ = [
    "PARSERS",
    "TOOLS",
    "ArgumentInvocation",
    "Invocation",
    "LazyInvocation",
    "Observation",
    "PieceTiming",
    "SandboxConfig",
    "SandboxReport",
    "Segment",
    "Tool",
    "ToolCall",
    "ToolCallError",
    "ToolRun",
    "ToolRuntime",
    "ToolSession",
    "ToolStream",
    "create_parser",
    "create_tool",
    "render_observation",
    "run_with_tools",
]
