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

import asyncio
import copy
import inspect
import json
import pickle
import re
import reprlib
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
    "check_tool",
    "fill_defaults",
    "split_input",
]


class ToolCallError(Exception):
    """The call is invalid or failed; ``str(error)`` is the observation the model will see.

    Any other exception a tool raises becomes an error observation too (``"name: Type: message"``)
    and never reaches the caller — unlike LangChain, where only ``ToolException`` is turned into
    an observation (``handle_tool_error``) and other errors propagate out of the agent.
    """


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
        result = self.run(fill_defaults(self.tool.parameters, self.arguments))
        if inspect.isawaitable(result):  # an ``async def run``: awaited in the worker
            result = asyncio.run(_awaited(result))
        if not isinstance(result, str):
            raise ToolCallError(f"{self.tool.name}: the tool returned {type(result).__name__}, "
                                "not str (return the observation as text, e.g. json.dumps)")
        return result

    @abstractmethod
    def run(self, arguments: dict[str, Any]) -> str:
        """Produce the observation from all arguments (may be ``async def``).

        ``arguments`` are what the model wrote, each checked against the schema (types, enums,
        nested objects and arrays) and every ``required`` one present, then completed with the
        schema's ``default`` of every property the model left out, inside written objects too
        (:func:`fill_defaults`; as a LangChain or LlamaIndex tool gets its Python defaults). An
        optional property without a ``default`` that the model left out stays absent. The
        ``on_value`` hooks see only what the model wrote. The result must be a ``str``
        (LangChain would ``str()`` anything else; here it is an error observation). A coroutine
        is run to completion with ``asyncio.run`` in the worker, under the same wall-time
        limit; the other hooks (``on_value``…) are synchronous.
        """


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
    """Check one argument against an object schema's ``properties``: its type and enum, and
    inside an object or array value, the same for its fields (``required`` ones present, no
    unknown one where ``additionalProperties`` is false) and items. ``$ref`` and combinators
    (``anyOf``…) are not followed: such a value is passed as written."""
    properties = schema.get("properties", {})
    if key not in properties:
        if schema.get("additionalProperties", True) is False or properties:
            raise ToolCallError(f"unknown argument {key!r}; expected one of {sorted(properties)}")
        return
    _check_value(properties[key], value, f"argument {key!r}")


def _shown(value: Any) -> str:
    """``value`` as an error message shows it: its repr, cut to a few nested levels and items
    (a model's wrong argument may be megabytes, and the message becomes its observation)."""
    shown = reprlib.Repr()
    shown.maxlevel, shown.maxstring, shown.maxother = 3, 60, 60
    shown.maxlist = shown.maxtuple = shown.maxdict = 4
    text = shown.repr(value)
    return text if len(text) <= 200 else text[:200] + "..."


def _check_value(spec: Mapping[str, Any], value: Any, where: str) -> None:
    types = spec.get("type")
    names = [types] if isinstance(types, str) else list(types or [])
    if names and not any(_is_type(value, name) for name in names):
        raise ToolCallError(f"{where} must be {' or '.join(names)}, got {_shown(value)}")
    if "enum" in spec and value not in spec["enum"]:
        raise ToolCallError(f"{where} must be one of {spec['enum']}, got {_shown(value)}")
    if isinstance(value, dict) and ("properties" in spec or "required" in spec):
        missing = [k for k in spec.get("required", ()) if k not in value]
        if missing:
            raise ToolCallError(f"{where} is missing required field(s) {missing}")
        fields = spec.get("properties", {})
        for k, v in value.items():
            if k in fields:
                _check_value(fields[k], v, f"{where} field {k!r}")
            elif spec.get("additionalProperties", True) is False:
                raise ToolCallError(f"{where} has unknown field {k!r}; expected one of "
                                    f"{sorted(fields)}")
    if isinstance(value, list) and isinstance(spec.get("items"), Mapping):
        for i, item in enumerate(value):
            _check_value(spec["items"], item, f"{where} item {i}")


def fill_defaults(schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> dict[str, Any]:
    """``arguments`` (already checked against the object ``schema``) with the ``default`` of
    each property they leave out, a fresh copy each time; inside an object or array value
    (written or a default) the same for its fields and items. A property without a
    ``default`` stays absent; ``$ref`` and combinators are not followed. ``arguments`` is not
    changed."""
    return _with_defaults(schema, dict(arguments))


def _with_defaults(spec: Mapping[str, Any], value: Any) -> Any:
    fields = spec.get("properties")
    if isinstance(value, dict) and isinstance(fields, Mapping):
        value = dict(value)
        for key, field in fields.items():
            if not isinstance(field, Mapping):
                continue
            if key in value:
                value[key] = _with_defaults(field, value[key])
            elif "default" in field:
                value[key] = _with_defaults(field, copy.deepcopy(field["default"]))
        return value
    if isinstance(value, list) and isinstance(spec.get("items"), Mapping):
        return [_with_defaults(spec["items"], item) for item in value]
    return value


def _is_type(value: Any, name: str) -> bool:
    if isinstance(value, bool) and name in ("integer", "number"):
        return False
    return isinstance(value, _TYPES.get(name, (object,)))


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


#: OpenAI's rule for function names, which chat templates and tool-call grammars assume
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def check_tool(tool: Tool) -> None:
    """Refuse a tool that cannot work, when it is registered rather than mid-run.

    Checks the ``name`` (1-64 letters, digits, ``_`` or ``-``, as OpenAI requires), the
    ``description`` (a string), ``parameters`` (an ``object`` schema whose ``properties`` are
    schemas and whose ``required`` and ``main_argument`` name properties; every ``default``,
    nested ones too, passes its own schema, as :func:`check_argument` checks a written value:
    it is what ``run()`` receives for a left-out argument), that the class
    implements :meth:`Tool.start` or :meth:`Tool.open_session`, and, for a tool run in a worker
    process, that it pickles and is not defined in ``__main__`` (the worker imports the tool's
    module by name). Raises ``TypeError`` or ``ValueError`` naming the tool and the fix.
    """
    name = getattr(tool, "name", None)
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"tool name {name!r} must be 1-64 letters, digits, '_' or '-' "
                         "(OpenAI's rule for function names)")
    if not isinstance(getattr(tool, "description", None), str):
        raise TypeError(f"tool {name!r}: description must be a str")
    _check_parameters(name, getattr(tool, "parameters", None), tool.main_argument)
    cls = type(tool)
    if cls.start is Tool.start and cls.open_session is Tool.open_session:
        raise TypeError(f"tool {name!r}: {cls.__name__} must implement start() or open_session()")
    if tool.isolation != "process":
        return
    if cls.__module__ == "__main__":
        raise ValueError(f"tool {name!r}: {cls.__name__} is defined in __main__, which a worker "
                         "process cannot import; define it in a module, or set "
                         "isolation='thread' (no sandbox)")
    try:
        pickle.dumps(tool)
    except Exception as exc:
        raise TypeError(f"tool {name!r} does not pickle ({type(exc).__name__}: {exc}); a worker "
                        "process receives the tool pickled: keep clients and closures out of its "
                        "fields (open them in open_session), or set isolation='thread'") from exc


def _check_parameters(name: str, schema: Any, main_argument: str | None) -> None:
    if not isinstance(schema, Mapping) or schema.get("type") != "object":
        raise ValueError(f"tool {name!r}: parameters must be a JSON schema of type 'object', "
                         f"got {schema!r}")
    properties = schema.get("properties", {})
    if not isinstance(properties, Mapping) or not all(
        isinstance(k, str) and isinstance(v, Mapping) for k, v in properties.items()
    ):
        raise ValueError(f"tool {name!r}: parameters.properties must map names to schemas")
    required = schema.get("required", [])
    if isinstance(required, str) or not all(k in properties for k in required):
        raise ValueError(f"tool {name!r}: parameters.required must list property names, got "
                         f"{required!r} (properties: {sorted(properties)})")
    if main_argument is not None and properties and main_argument not in properties:
        raise ValueError(f"tool {name!r}: main_argument {main_argument!r} is not a property")
    _check_defaults(name, schema, "")


def _check_defaults(name: str, spec: Mapping[str, Any], where: str) -> None:
    fields = spec.get("properties")
    for key, field in (fields.items() if isinstance(fields, Mapping) else ()):
        if not isinstance(field, Mapping):
            continue
        at = f"{where} field {key!r}" if where else f"argument {key!r}"
        if "default" in field:
            try:
                _check_value(field, field["default"], at)
            except ToolCallError as exc:
                raise ValueError(f"tool {name!r}: the default of {at} fails its own schema: "
                                 f"{exc} (it is what the tool receives when the model leaves "
                                 "the argument out)") from None
        _check_defaults(name, field, at)
    if isinstance(spec.get("items"), Mapping):
        _check_defaults(name, spec["items"], f"{where} items")
