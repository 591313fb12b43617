"""The tool plugin interface: a tool works on its call while the model is still writing it.

A :class:`Tool` describes itself (name, description, JSON-schema ``parameters``) and, inside its
worker process, opens a :class:`ToolSession` (state kept across calls of one agent session: an
interpreter's globals, a database connection, a loaded index). Each call is an
:class:`Invocation` that receives every completed piece through :meth:`Invocation.feed` — a code
statement, a streamed part of a string argument, a complete argument, or a ReAct input — then
:meth:`Invocation.finish` returns the observation; :meth:`Invocation.abort` drops the call.
Raising :class:`ToolCallError` from ``feed`` rejects the call early: the runtime stops decoding it
and the message becomes the observation [Conveyor]. :class:`LazyInvocation` buffers every piece
until ``finish`` — the baseline without partial execution.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from agentrt.agent.parsers.base import Piece
from agentrt.agent.sandbox import SandboxConfig

__all__ = [
    "ArgumentInvocation",
    "Invocation",
    "LazyInvocation",
    "Observation",
    "PieceTiming",
    "Tool",
    "ToolCallError",
    "ToolSession",
    "check_argument",
    "split_input",
]


class ToolCallError(Exception):
    """The call is invalid or failed; ``str(error)`` is the observation the model will see."""


@dataclass(frozen=True)
class PieceTiming:
    """When the worker processed piece ``index`` (``time.monotonic()``, system-wide on Linux)."""

    index: int
    kind: str
    started: float
    ended: float


@dataclass(frozen=True)
class Observation:
    """The result of one tool call, as returned to the agent."""

    tool: str
    text: str
    is_error: bool = False
    #: index of the piece whose feed rejected the call (early abort), else None
    rejected_at: int | None = None
    timings: tuple[PieceTiming, ...] = ()
    finish_started: float | None = None
    finish_ended: float | None = None


class Invocation(ABC):
    """One running call of a tool, inside the worker. Pieces arrive in output order."""

    #: the argument that receives a ReAct input or a fenced code block, if any
    main_argument: str | None = None

    def feed(self, piece: Piece) -> None:
        """Handle one completed piece; raise :class:`ToolCallError` to reject the call."""
        if piece.kind == "statement":
            self.on_statement(piece.text)
        elif piece.kind == "delta":
            self.on_delta(piece.key or "", piece.text)
        elif piece.kind == "argument":
            self.on_argument(piece.key or "", piece.value)
        else:
            for key, value in split_input(piece.text, self.main_argument).items():
                self.on_argument(key, value)

    def on_statement(self, text: str) -> None:
        """A complete statement of a fenced code block."""
        raise ToolCallError("this tool does not take code blocks")

    def on_delta(self, key: str, text: str) -> None:  # noqa: B027 - optional hook
        """The next part of string argument ``key`` (its complete value follows later)."""

    @abstractmethod
    def on_argument(self, key: str, value: Any) -> None:
        """Argument ``key`` is complete."""

    @abstractmethod
    def finish(self) -> str:
        """The call is complete: return the observation text (raise ToolCallError on failure)."""

    def abort(self) -> None:  # noqa: B027 - optional hook
        """The call was dropped: release what it holds; no observation is needed."""


class ArgumentInvocation(Invocation):
    """A call that works on whole argument values, checked against the schema as they arrive."""

    def __init__(self, tool: Tool) -> None:
        self.tool = tool
        self.main_argument = tool.main_argument
        self.arguments: dict[str, Any] = {}

    def on_argument(self, key: str, value: Any) -> None:
        check_argument(self.tool.parameters, key, value)
        self.arguments[key] = value
        self.on_value(key, value)

    def on_value(self, key: str, value: Any) -> None:  # noqa: B027 - optional hook
        """Start work on a validated argument before the call is complete (optional)."""

    def finish(self) -> str:
        missing = [k for k in self.tool.parameters.get("required", ()) if k not in self.arguments]
        if missing:
            raise ToolCallError(f"{self.tool.name}: missing required argument(s) {missing}")
        return self.run(self.arguments)

    @abstractmethod
    def run(self, arguments: dict[str, Any]) -> str:
        """Produce the observation from all arguments."""


class LazyInvocation(Invocation):
    """Buffers every piece and replays them at ``finish`` (no partial execution)."""

    def __init__(self, inner: Invocation) -> None:
        self.inner = inner
        self.pieces: list[Piece] = []

    def feed(self, piece: Piece) -> None:
        self.pieces.append(piece)

    def on_argument(self, key: str, value: Any) -> None:  # pragma: no cover - feed() overrides
        self.pieces.append(Piece("argument", key=key, value=value))

    def finish(self) -> str:
        for piece in self.pieces:
            self.inner.feed(piece)
        return self.inner.finish()

    def abort(self) -> None:
        self.inner.abort()


class ToolSession:
    """A tool's state in its worker, kept across the calls of one agent session."""

    def __init__(self, tool: Tool) -> None:
        self.tool = tool

    def start(self) -> Invocation:
        """Begin a new call."""
        return self.tool.start()

    def close(self) -> None:  # noqa: B027 - optional hook
        """The session ends (the worker exits after this)."""


class Tool(ABC):
    """A tool the model can call. Instances are pickled into the worker process.

    Subclasses set ``name``, ``description``, ``parameters`` and implement :meth:`start` (or
    :meth:`open_session` for state kept across calls).
    """

    name: ClassVar[str]
    description: ClassVar[str]
    #: JSON schema of the arguments (an ``object`` schema)
    parameters: ClassVar[Mapping[str, Any]]
    main_argument: ClassVar[str | None] = None
    #: where the tool runs: its own process (sandboxed) or a thread of the caller (trusted only)
    isolation: ClassVar[Literal["process", "thread"]] = "process"
    sandbox: SandboxConfig = SandboxConfig()
    #: modules imported once in the template process, so every worker has them warm
    preload: tuple[str, ...] = ()

    def start(self) -> Invocation:
        """A new call of a stateless tool."""
        raise NotImplementedError(f"{type(self).__name__} must implement start() or open_session()")

    def open_session(self, workdir: Path) -> ToolSession:
        """Open the tool's state inside its worker (before the sandbox closes)."""
        return ToolSession(self)

    def spec(self) -> dict[str, Any]:
        """The tool in the OpenAI / Hermes function format used by chat templates."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": dict(self.parameters),
            },
        }


def split_input(text: str, main_argument: str | None) -> dict[str, Any]:
    """Arguments from free text: a JSON object, else the whole text as ``main_argument``."""
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            value = json.loads(stripped)
        except json.JSONDecodeError:
            value = None
        if isinstance(value, dict):
            return value
    if main_argument is None:
        raise ToolCallError("this tool needs JSON arguments, got plain text")
    return {main_argument: text}


_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


def check_argument(schema: Mapping[str, Any], key: str, value: Any) -> None:
    """Check one argument against an object schema's ``properties`` (type and enum)."""
    properties = schema.get("properties", {})
    if key not in properties:
        if schema.get("additionalProperties", True) is False or properties:
            raise ToolCallError(f"unknown argument {key!r}; expected one of {sorted(properties)}")
        return
    spec = properties[key]
    types = spec.get("type")
    names = [types] if isinstance(types, str) else list(types or [])
    if names and not any(_is_type(value, name) for name in names):
        raise ToolCallError(f"argument {key!r} must be {' or '.join(names)}, got {value!r}")
    if "enum" in spec and value not in spec["enum"]:
        raise ToolCallError(f"argument {key!r} must be one of {spec['enum']}, got {value!r}")


def _is_type(value: Any, name: str) -> bool:
    if isinstance(value, bool) and name in ("integer", "number"):
        return False
    return isinstance(value, _TYPES.get(name, (object,)))
