"""Adapters both ways between agentrt tools and LangChain tools (``langchain-core``).

:func:`to_langchain` wraps an agentrt :class:`~agentrt.agent.plugin.Tool` as a LangChain
``BaseTool`` that runs in an agentrt worker (sandboxed, session state kept), so a LangChain agent
can use ``python_repl`` or ``sqlite`` unchanged. :func:`from_langchain` wraps a LangChain tool as
an agentrt tool; LangChain tools have no partial interface, so it runs lazily — arguments are
checked as they stream, the tool runs once at ``finish``. It runs in a thread of the caller by
default (LangChain tools often hold clients or closures that cannot be pickled; no sandbox), or in
a worker process with ``isolation="process"`` when the tool pickles.

Part of the LangChain integration, not of ``agentrt``: nothing in ``agentrt`` outside
``agentrt.server`` imports a framework (``tests/test_import_graph.py``).
"""

from __future__ import annotations

from typing import Any, Literal

from langchain_core.tools import BaseTool, ToolException
from pydantic import BaseModel, ConfigDict, Field, create_model

from agentrt.agent.plugin import ArgumentInvocation, Invocation, Tool, ToolCallError
from agentrt.agent.runtime import ToolRuntime
from agentrt.agent.sandbox import SandboxConfig

__all__ = ["AgentRTTool", "LangChainTool", "from_langchain", "to_langchain"]


class AgentRTTool(BaseTool):
    """A LangChain tool backed by an agentrt tool running in an agentrt worker."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    runtime: Any = Field(exclude=True)
    session: str = "langchain"
    handle_tool_error: bool = True

    def _run(self, *args: Any, run_manager: Any = None, **kwargs: Any) -> str:
        tool = self.runtime.tools[self.name]
        if args:  # a single string input (ReAct agents)
            kwargs = {tool.main_argument or "input": args[0], **kwargs}
        arguments = {k: v for k, v in kwargs.items() if v is not None}
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
        args_schema=_args_model(spec),
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
            result = tool.invoke(arguments)
        except Exception as exc:
            raise ToolCallError(f"{tool.name}: {type(exc).__name__}: {exc}") from None
        return result if isinstance(result, str) else str(getattr(result, "content", result))


def from_langchain(
    tool: BaseTool, *, isolation: Literal["process", "thread"] = "thread"
) -> LangChainTool:
    """A LangChain tool as an agentrt tool (runs at ``finish``; see the module docstring)."""
    return LangChainTool(tool, isolation=isolation)


_PY_TYPES: dict[str, Any] = {
    "string": str, "integer": int, "number": float, "boolean": bool, "array": list, "object": dict,
}


def _args_model(tool: Tool) -> type[BaseModel]:
    """A pydantic model of the tool's JSON-schema arguments (LangChain validates with it)."""
    required = set(tool.parameters.get("required", ()))
    fields: dict[str, Any] = {}
    for key, spec in tool.parameters.get("properties", {}).items():
        kind = _PY_TYPES.get(spec.get("type"), Any)
        default = ... if key in required else None
        annotation = kind if key in required else kind | None
        fields[key] = (annotation, Field(default, description=spec.get("description")))
    return create_model(f"{tool.name}_arguments", **fields)


def _schema(tool: BaseTool) -> dict[str, Any]:
    try:
        schema = tool.get_input_jsonschema()
    except Exception:  # some custom tools have no schema: a single string input
        schema = {"type": "object", "properties": {"input": {"type": "string"}}}
    return {k: v for k, v in schema.items() if k in ("type", "properties", "required")}
