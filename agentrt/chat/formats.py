"""Tool-call formats per model family, read from the model's chat template.

A model writes tool calls the way its chat template shows them back in the history, so the
format is chosen from the template text (:func:`detect_format`) and can be named instead:

- ``"hermes"`` (Hermes, Qwen2.5/Qwen3, SmolLM2 through agentrt's fallback):
  ``<tool_call>\\n{"name": "X", "arguments": {...}}\\n</tool_call>``, one block per call.
- ``"llama3"`` (Llama 3.1–3.3 JSON tool calls): ``{"name": "X", "parameters": {...}}``, calls
  separated by ``;``; the model may open a call with ``<|python_tag|>`` or directly with
  ``{"name"`` — or, as Llama 3.2 models often do when decoding is free, with a
  ``{"type": "function", "name": …}`` key first; parallel calls written as one JSON list
  (``[{"name": …}, …]``, free decoding) are read too.
- ``"mistral"`` (Mistral v0.3, Nemo): ``[TOOL_CALLS] [{"name": "X", "arguments": {...}}]``,
  all calls of a turn in one JSON list (one object without the list is read as one call).
- ``"mistral_args"`` (Mistral tokenizers v11+: Magistral, Devstral, Mistral-Small-3.2,
  Ministral 3): ``[TOOL_CALLS]X[ARGS]{...}``, one ``[TOOL_CALLS]`` per call, the arguments
  object alone after ``[ARGS]``; v11 templates put the call's id in between,
  ``[TOOL_CALLS]X[CALL_ID]abcdefghi[ARGS]{...}``.
- ``"qwen_xml"`` (Qwen3-Coder): XML calls, ``<tool_call>``, ``<function=X>``, a
  ``<parameter=a>\\n1\\n</parameter>`` block per argument, ``</function>``,
  ``</tool_call>`` (each on its own line); a value as text (a string as it is, else JSON).

What the grammar makes the model write (:mod:`.grammar`), what the history shows
(:mod:`.template`) and what the parser reads (:mod:`.tool_calls`) all come from one
:class:`ToolCallFormat`. Reasoning is read in one of two syntaxes, chosen from the template
(:func:`detect_reasoning`): Qwen3-style ``<think>`` … ``</think>`` blocks, or Magistral's
(2507, 2509) ``[THINK]`` … ``[/THINK]`` special tokens; its text is reasoning content, never
a tool call.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, NamedTuple

from agentrt.agent.parsers.json_toolcall import LLAMA32_OPENS

__all__ = [
    "FORMATS",
    "HERMES",
    "LLAMA3",
    "MISTRAL",
    "MISTRAL_ARGS",
    "QWEN_XML",
    "Reasoning",
    "ReasoningTags",
    "ToolCallFormat",
    "detect_format",
    "detect_reasoning",
    "get_format",
    "reasoning_tags",
    "template_text",
    "xml_value",
]

Reasoning = Literal["none", "detect", "open", "detect_mistral", "open_mistral"]
"""``none``: no reasoning syntax; ``detect``: a ``<think>`` block opens reasoning; ``open``:
the prompt ended inside ``<think>``, so the output starts as reasoning; ``detect_mistral`` /
``open_mistral``: the same with Magistral's ``[THINK]`` … ``[/THINK]``."""
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
MISTRAL_THINK_OPEN, MISTRAL_THINK_CLOSE = "[THINK]", "[/THINK]"


class ReasoningTags(NamedTuple):
    """The tags around a reasoning block, and whether the output starts inside one."""

    open: str
    close: str
    is_open: bool
    after: str
    """What the model writes after ``close``, before its answer (Qwen3: a blank line)."""


_REASONING_TAGS: dict[str, ReasoningTags] = {
    "detect": ReasoningTags(THINK_OPEN, THINK_CLOSE, False, "\n\n"),
    "open": ReasoningTags(THINK_OPEN, THINK_CLOSE, True, "\n\n"),
    "detect_mistral": ReasoningTags(MISTRAL_THINK_OPEN, MISTRAL_THINK_CLOSE, False, ""),
    "open_mistral": ReasoningTags(MISTRAL_THINK_OPEN, MISTRAL_THINK_CLOSE, True, ""),
}
_ID_CHARS = re.compile(r"[A-Za-z0-9]+")


@dataclass(frozen=True)
class ToolCallFormat:
    """How one model family writes tool calls."""

    name: str
    syntax: str
    """The streaming parser of the agent layer for this format (partial execution)."""
    open_tags: tuple[str, ...]
    """Markers that open a call (or Mistral's list of calls) and are not part of the JSON."""
    bare_opens: tuple[str, ...] = ()
    """Markers that open a call as the start of its own JSON (Llama 3's ``{"name"``)."""
    loose_opens: tuple[str, ...] = ()
    """Like ``bare_opens``, read but never written (no grammar makes the model write them):
    Llama 3.2's ``{"type": "function", "name": …}`` calls."""
    close_tag: str = ""
    """Closes one call (Hermes' ``</tool_call>``); empty: the JSON object ends the call."""
    arguments_key: str = "arguments"
    call_begin: str = ""
    """Written before one call's JSON (Hermes: ``<tool_call>\\n``)."""
    call_end: str = ""
    """Written after one call's JSON (Hermes: ``\\n</tool_call>``)."""
    separator: str = "\n"
    """Written between two calls."""
    list_begin: str = ""
    """Mistral: the calls of a turn are one JSON list that starts with this."""
    list_end: str = ""
    call_id_len: int = 0
    """Length of the call ids the template accepts (Mistral: 9 alphanumerics); 0: any id."""
    args_tag: str = ""
    """Mistral v11+: a call is ``call_begin`` + name + ``args_tag`` + the arguments object
    (the name outside the JSON); empty: the call is one JSON object with a ``name`` key."""
    call_id_tag: str = ""
    """Written with the call's id between the name and ``args_tag`` (Mistral v11's
    ``[CALL_ID]``)."""
    is_xml: bool = False
    """Qwen3-Coder: a call is ``<function=name>`` and a ``<parameter=key>`` block per argument
    (between ``call_begin`` and ``call_end``), no JSON object."""

    def __post_init__(self) -> None:
        if not self.open_tags:
            raise ValueError(f"tool-call format {self.name!r} needs an open tag")
        if bool(self.list_begin) != bool(self.list_end):
            raise ValueError("list_begin and list_end go together")
        if self.call_id_tag and not (self.args_tag and self.call_id_len):
            raise ValueError("call_id_tag needs args_tag and call_id_len")

    @property
    def markers(self) -> tuple[str, ...]:
        """Every marker of a call (decoding must keep them when they are special tokens)."""
        return tuple(m for m in (*self.open_tags, self.args_tag, self.call_id_tag) if m)

    @property
    def is_list(self) -> bool:
        return bool(self.list_begin)

    def call_json(self, name: str, args: Mapping[str, Any]) -> str:
        """One call's JSON: ``{"name": …, "<arguments key>": {…}}`` (with ``args_tag``:
        ``name[ARGS]{…}``, ``name[CALL_ID]id[ARGS]{…}`` with an id made from the call)."""
        if self.is_xml:
            return f"<function={name}>\n" + "".join(
                f"<parameter={key}>\n{xml_value(value)}\n</parameter>\n"
                for key, value in args.items())
        if not self.args_tag:
            return json.dumps({"name": name, self.arguments_key: args}, ensure_ascii=False)
        arguments = json.dumps(args, ensure_ascii=False)
        if not self.call_id_tag:
            return f"{name}{self.args_tag}{arguments}"
        call_id = self.template_call_id(f"{name}\0{arguments}")
        return f"{name}{self.call_id_tag}{call_id}{self.args_tag}{arguments}"

    def format_call(self, name: str, args: Mapping[str, Any]) -> str:
        """One call exactly as the grammar makes the model write it (outside a list)."""
        return f"{self.call_begin}{self.call_json(name, args)}{self.call_end}"

    def format_calls(self, calls: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
        """An assistant turn of calls ``[(name, args)]``, as the model writes it."""
        body = self.separator.join(self.format_call(name, args) for name, args in calls)
        return f"{self.list_begin}{body}{self.list_end}"

    def call_prefix(self, name: str) -> str:
        """A call up to its arguments object (a grammar tag's ``begin``; with
        ``call_id_tag``, up to the id)."""
        if self.is_xml:
            return f"{self.call_begin}<function={name}>\n"
        if self.call_id_tag:
            return f"{self.call_begin}{name}{self.call_id_tag}"
        if self.args_tag:
            return f"{self.call_begin}{name}{self.args_tag}"
        return f'{self.call_begin}{{"name": {json.dumps(name)}, "{self.arguments_key}": '

    @property
    def call_suffix(self) -> str:
        """A call after its arguments object (a grammar tag's ``end``)."""
        return self.call_end if self.args_tag or self.is_xml else "}" + self.call_end

    def template_call_id(self, call_id: str) -> str:
        """``call_id`` in the form the template accepts (the same id maps to the same one)."""
        if not self.call_id_len or (len(call_id) == self.call_id_len
                                    and _ID_CHARS.fullmatch(call_id)):
            return call_id
        return hashlib.sha1(call_id.encode()).hexdigest()[: self.call_id_len]


HERMES = ToolCallFormat(
    "hermes", "json_toolcall", open_tags=("<tool_call>",), close_tag="</tool_call>",
    call_begin="<tool_call>\n", call_end="\n</tool_call>", separator="\n")
LLAMA3 = ToolCallFormat(
    "llama3", "llama3_json", open_tags=("<|python_tag|>",), bare_opens=('{"name"',),
    loose_opens=LLAMA32_OPENS, arguments_key="parameters", separator="; ")
MISTRAL = ToolCallFormat(
    "mistral", "mistral_json", open_tags=("[TOOL_CALLS]",), separator=", ",
    list_begin="[TOOL_CALLS] [", list_end="]", call_id_len=9)
MISTRAL_ARGS = ToolCallFormat(
    "mistral_args", "mistral_args", open_tags=("[TOOL_CALLS]",), args_tag="[ARGS]",
    call_begin="[TOOL_CALLS]", separator="")
QWEN_XML = ToolCallFormat(
    "qwen_xml", "qwen_xml", open_tags=("<tool_call>",), close_tag="</tool_call>",
    call_begin="<tool_call>\n", call_end="</function>\n</tool_call>", is_xml=True)
FORMATS: dict[str, ToolCallFormat] = {
    f.name: f for f in (HERMES, LLAMA3, MISTRAL, MISTRAL_ARGS, QWEN_XML)}


def xml_value(value: Any) -> str:
    """A parameter's value as an XML call writes it: a string as it is, else JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def get_format(name: str | ToolCallFormat) -> ToolCallFormat:
    """The registered format ``name`` (a :class:`ToolCallFormat` is returned as it is)."""
    if isinstance(name, ToolCallFormat):
        return name
    try:
        return FORMATS[name]
    except KeyError:
        raise ValueError(f"unknown tool-call format {name!r}; known: "
                         f"{', '.join(sorted(FORMATS))}") from None


def template_text(source: Any) -> str:
    """The chat template of a tokenizer (or the template string itself); '' if none."""
    template = source if isinstance(source, str) or source is None else \
        getattr(source, "chat_template", None)
    if isinstance(template, Mapping):  # named templates: the tool-use one, else the default
        template = template.get("tool_use") or template.get("default") or ""
    return template or ""


def detect_format(source: Any, override: str | ToolCallFormat | None = None) -> ToolCallFormat:
    """The tool-call format of a tokenizer's chat template (or of a template string).

    ``[TOOL_CALLS]`` and ``[ARGS]`` in the template → Mistral v11+ (with ``[CALL_ID]`` and
    9-character ids where the template writes them); ``[TOOL_CALLS]`` alone → Mistral's JSON
    list (with the template's own spacing before the list); ``<function=`` and
    ``<parameter=`` → Qwen3-Coder's XML calls; ``<tool_call>`` → Hermes;
    ``<|python_tag|>``, or ``"parameters"`` calls ended by ``<|eot_id|>`` → Llama 3; anything
    else (a template that renders no tools) → Hermes, agentrt's fallback convention.
    ``override`` names the format instead.
    """
    if override is not None:
        return get_format(override)
    template = template_text(source)
    if "[TOOL_CALLS]" in template and "[ARGS]" in template:
        if "[CALL_ID]" in template:
            return replace(MISTRAL_ARGS, call_id_tag="[CALL_ID]", call_id_len=9)
        return MISTRAL_ARGS
    if "[TOOL_CALLS]" in template:
        if '"[TOOL_CALLS][' in template or "'[TOOL_CALLS][" in template:
            return replace(MISTRAL, list_begin="[TOOL_CALLS][")  # Nemo: no space
        return MISTRAL
    if "<function=" in template and "<parameter=" in template:
        return QWEN_XML
    if "<tool_call>" in template:
        return HERMES
    if "<|python_tag|>" in template or ('"parameters"' in template and "<|eot_id|>" in template):
        return LLAMA3
    return HERMES


def detect_reasoning(source: Any, prompt: str = "") -> Reasoning:
    """Whether output may hold reasoning, and in which syntax: ``detect_mistral`` when the
    template knows Magistral's ``[THINK]`` (its default system prompt shows the block), else
    ``detect`` when it knows ``<think>``, else ``none``; ``open`` / ``open_mistral`` when
    ``prompt`` ends inside such a block (the template opened it for the model)."""
    template = template_text(source)
    detect: Reasoning
    for detect, opened in (("detect_mistral", "open_mistral"), ("detect", "open")):
        tags = _REASONING_TAGS[detect]
        if tags.open in template or tags.close in template:
            return opened if prompt.rstrip().endswith(tags.open) else detect
    return "none"


def reasoning_tags(reasoning: Reasoning) -> ReasoningTags | None:
    """The tags of ``reasoning``'s syntax (None for ``"none"``); a ``ValueError`` for a mode
    that is none of :data:`Reasoning`."""
    if reasoning == "none":
        return None
    try:
        return _REASONING_TAGS[reasoning]
    except KeyError:
        raise ValueError(f"unknown reasoning mode {reasoning!r}; known: none, "
                         f"{', '.join(_REASONING_TAGS)}") from None
