"""Adapters both ways between agentrt tools and LangChain tools (``langchain-core``).

:func:`to_langchain` wraps an agentrt :class:`~agentrt.agent.plugin.Tool` as a LangChain
``BaseTool`` that runs in an agentrt worker (sandboxed, session state kept), so a LangChain agent
can use ``python_repl`` or ``sqlite`` unchanged. :func:`from_langchain` wraps a LangChain tool as
an agentrt tool; LangChain tools have no partial interface, so it runs lazily — arguments are
checked as they stream, the tool runs once at ``finish``. It runs in a thread of the caller by
default (LangChain tools often hold clients or closures that cannot be pickled; no sandbox), or in
a worker process with ``isolation="process"`` when the tool pickles. A LangChain tool with only
a coroutine (``StructuredTool(coroutine=...)``) runs with ``asyncio.run`` in that thread or
worker. The schema crosses both ways as JSON schema (``$defs`` of nested models kept). agentrt
fills in the schema's defaults of left-out arguments before a tool runs (see
``ArgumentInvocation.run``), the same values LangChain's own validation would give; a Python
default the schema cannot hold (``limit: int = None``, which pydantic writes as an integer with
a null default) is left out of the schema, and the LangChain tool applies it itself.

Part of the LangChain integration, not of ``agentrt``: nothing in ``agentrt`` outside
``agentrt.server`` imports a framework (``tests/test_import_graph.py``).
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from langchain_core.tools import BaseTool, ToolException
from pydantic import ConfigDict, Field

from agentrt.agent.plugin import (
    ArgumentInvocation,
    Invocation,
    Tool,
    ToolCallError,
    check_argument,
)
from agentrt.agent.runtime import ToolRuntime
from agentrt.agent.sandbox import SandboxConfig

__all__ = ["AgentRTTool", "LangChainTool", "from_langchain", "to_langchain"]


class AgentRTTool(BaseTool):
    """A LangChain tool backed by an agentrt tool running in an agentrt worker."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    runtime: Any = Field(exclude=True)
    session: str = "langchain"
    handle_tool_error: bool = True

    def _parse_input(self, tool_input: str | dict[str, Any], tool_call_id: str | None) -> Any:
        """The input as given: the agentrt tool checks it against its JSON schema (LangChain
        refuses a string input with a JSON-schema ``args_schema``; a ReAct agent sends one)."""
        return tool_input

    def _run(self, *args: Any, run_manager: Any = None, **kwargs: Any) -> str:
        tool = self.runtime.tools[self.name]
        if args:  # a single string input (ReAct agents)
            kwargs = {tool.main_argument or "input": args[0], **kwargs}
        arguments = {k: v for k, v in kwargs.items() if v is not None or _takes_null(tool, k)}
        observation = self._started(args, arguments)
        if observation is None:
            observation = self.runtime.run(self.name, arguments, session=self.session)
        if observation.is_error:
            raise ToolException(observation.text)
        return observation.text

    def _started(self, args: tuple, arguments: dict[str, Any]) -> Any:
        """The observation of this call if it already ran while the model wrote it (an
        ``agentrt.Executor`` run offers it), else None."""
        wanted = {"input": args[0]} if args else arguments
        call = self.runtime.take(self.name, wanted, session=self.session)
        return call.result() if call is not None else None


def to_langchain(
    tool: Tool | str, runtime: ToolRuntime | None = None, *, session: str = "langchain"
) -> AgentRTTool:
    """An agentrt tool (or registered tool name) as a LangChain ``BaseTool``."""
    runtime = runtime or ToolRuntime()
    name = tool if isinstance(tool, str) else tool.name
    if name not in runtime.tools:
        runtime.add(tool)
    spec = runtime.tools[name]
    return AgentRTTool(
        name=spec.name,
        description=spec.description,
        args_schema=dict(spec.parameters),  # as is: LangChain passes the input through
        runtime=runtime,
        session=session,
    )


class LangChainTool(Tool):
    """A LangChain tool run inside agentrt, lazily (see the module docstring)."""

    def __init__(
        self, tool: BaseTool, *, isolation: Literal["process", "thread"] = "thread",
        sandbox: SandboxConfig | None = None,
    ) -> None:
        self.tool = tool
        self.name = tool.name  # type: ignore[misc]
        self.description = tool.description  # type: ignore[misc]
        self.parameters = _schema(tool)  # type: ignore[misc]
        properties = list(self.parameters.get("properties", {}))
        self.main_argument = properties[0] if len(properties) == 1 else None  # type: ignore[misc]
        self.isolation = isolation  # type: ignore[misc]
        self.sandbox = sandbox or SandboxConfig.off()

    def start(self) -> Invocation:
        return _LangChainCall(self)


class _LangChainCall(ArgumentInvocation):
    def run(self, arguments: dict[str, Any]) -> str:
        tool: BaseTool = self.tool.tool  # type: ignore[attr-defined]
        try:
            if _is_async_only(tool):
                result = asyncio.run(tool.ainvoke(arguments))
            else:
                result = tool.invoke(arguments)
        except Exception as exc:
            raise ToolCallError(f"{tool.name}: {type(exc).__name__}: {exc}") from None
        return result if isinstance(result, str) else str(getattr(result, "content", result))


def from_langchain(
    tool: BaseTool, *, isolation: Literal["process", "thread"] = "thread",
    sandbox: SandboxConfig | None = None,
) -> LangChainTool:
    """A LangChain tool as an agentrt tool (runs at ``finish``; see the module docstring).

    ``sandbox``: the worker's limits (default :meth:`SandboxConfig.off`: none, not even a wall
    time, as LangChain sets none); ``dataclasses.replace(SandboxConfig.off(), max_wall_s=30)``
    gives a tool that may hang a deadline: past it the call's observation is an error (a thread
    worker is abandoned, not stopped).
    """
    return LangChainTool(tool, isolation=isolation, sandbox=sandbox)


def _takes_null(tool: Tool, key: str) -> bool:
    """Whether argument ``key`` may be null; else a None (what an agent writes for an optional
    argument it does not use, as OpenAI's strict mode does) means the argument is left out."""
    kind = tool.parameters.get("properties", {}).get(key, {}).get("type")
    return kind == "null" or (isinstance(kind, list) and "null" in kind)


def _is_async_only(tool: BaseTool) -> bool:
    """A ``StructuredTool`` / ``Tool`` given only a coroutine (its sync ``invoke`` raises)."""
    return getattr(tool, "func", True) is None and getattr(tool, "coroutine", None) is not None


def _schema(tool: BaseTool) -> dict[str, Any]:
    try:
        schema = tool.get_input_jsonschema()
    except Exception:  # some custom tools have no schema: a single string input
        schema = {"type": "object", "properties": {"input": {"type": "string"}}}
    schema = {k: v for k, v in schema.items()
              if k in ("type", "properties", "required", "$defs")}
    if isinstance(schema.get("properties"), dict):
        schema["properties"] = {k: _without_bad_default(schema, k)
                                for k in schema["properties"]}
    return schema


def _without_bad_default(schema: dict[str, Any], key: str) -> Any:
    """Property ``key`` without its ``default`` where the default fails the property's own
    schema (pydantic writes ``x: int = None`` so): agentrt would refuse the tool at
    registration, and the LangChain tool applies its Python default when the key is absent."""
    spec = schema["properties"][key]
    if not isinstance(spec, dict) or "default" not in spec:
        return spec
    try:
        check_argument(schema, key, spec["default"])
    except ToolCallError:
        return {k: v for k, v in spec.items() if k != "default"}
    return spec
