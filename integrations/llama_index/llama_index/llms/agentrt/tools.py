"""agentrt tools as LlamaIndex tools: ``to_llama_index("calculator", runtime)``.

An agentrt tool (calculator, sqlite, python_repl, search: any
:class:`~agentrt.agent.plugin.Tool`) runs in an agentrt worker — sandboxed, its session state
kept across calls — as :func:`langchain_agentrt.tools.to_langchain` runs it for
LangChain. The tool's JSON schema goes to LlamaIndex as it is (:class:`JsonSchemaMetadata`,
no pydantic round trip), so the arguments the model is constrained to are the tool's own.
A failed call is an error ``ToolOutput`` for the agent to react to, never an exception.
"""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass, field
from typing import Any

from llama_index.core.bridge.pydantic import BaseModel
from llama_index.core.tools.types import AsyncBaseTool, ToolMetadata, ToolOutput

from agentrt.agent.plugin import Tool
from agentrt.agent.runtime import ToolRuntime

__all__ = ["AgentRTTool", "JsonSchemaMetadata", "to_llama_index"]


@dataclass
class JsonSchemaMetadata(ToolMetadata):
    """``ToolMetadata`` whose arguments are a JSON schema rather than a pydantic model."""

    fn_schema: type[BaseModel] | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    """The JSON schema of the arguments (``type``, ``properties``, ``required``)."""

    def get_parameters_dict(self) -> dict[str, Any]:
        return dict(self.parameters)

    @property
    def fn_schema_str(self) -> str:
        return json.dumps(self.parameters, ensure_ascii=False)


class AgentRTTool(AsyncBaseTool):
    """A LlamaIndex tool backed by an agentrt tool running in an agentrt worker."""

    def __init__(self, runtime: ToolRuntime, name: str, *, session: str = "llama_index") -> None:
        spec = runtime.tools[name]
        self.runtime, self.session, self.spec = runtime, session, spec
        self._metadata = JsonSchemaMetadata(description=spec.description, name=spec.name,
                                            parameters=spec.parameters)
        self._lock = threading.Lock()  # NOTE: one call at a time in the session's worker

    @property
    def metadata(self) -> JsonSchemaMetadata:
        return self._metadata

    def call(self, *args: Any, **kwargs: Any) -> ToolOutput:
        """Run the tool (a single positional input goes to its main argument)."""
        if args:
            kwargs = {self.spec.main_argument or "input": args[0], **kwargs}
        arguments = {k: v for k, v in kwargs.items() if v is not None}
        with self._lock:
            observation = self.runtime.run(self.spec.name, arguments, session=self.session)
        return ToolOutput(tool_name=self.spec.name, content=observation.text,
                          raw_input=arguments, raw_output=observation.text,
                          is_error=observation.is_error)

    async def acall(self, *args: Any, **kwargs: Any) -> ToolOutput:
        return await asyncio.to_thread(self.call, *args, **kwargs)


def to_llama_index(tool: Tool | str, runtime: ToolRuntime | None = None, *,
                   session: str = "llama_index") -> AgentRTTool:
    """An agentrt tool (or registered tool name) as a LlamaIndex tool."""
    runtime = runtime or ToolRuntime()
    name = tool if isinstance(tool, str) else tool.name
    if name not in runtime.tools:
        runtime.add(tool)
    return AgentRTTool(runtime, name, session=session)
