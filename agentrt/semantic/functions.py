"""Semantic functions (Parrot): prompt templates whose slots are semantic variables.

A semantic function is a prompt template whose ``{{input:x}}`` and ``{{output:y}}`` slots are
semantic variables. Calling one inside a :class:`~agentrt.semantic.SemanticSession` only
*submits*: it returns future variables, so the session knows the whole request DAG before
anything runs.

>>> @semantic_function(max_tokens=48)
... def write_code(task: SemanticVariable):
...     \"\"\"Write python code for {{input:task}}. Code: {{output:code}}\"\"\"
>>> with SemanticSession(backend) as s:
...     code = write_code(s.variable("task", "reversing a string"))
...     print(code.get(perf=Perf.LATENCY))

A multi-output template is one model request continued: each next output is generated as
the next call of the same backend session, on the text so far re-encoded (see
:mod:`agentrt.semantic.executor`).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, overload

from agentrt.core.sampling_params import SamplingParams
from agentrt.semantic.session import current_session

__all__ = ["Rendered", "SemanticFunction", "Template", "semantic_function"]

_PLACEHOLDER = re.compile(r"\{\{\s*(input|output)\s*:\s*(\w+)\s*\}\}")


# --- templates ----------------------------------------------------------------------------
class Rendered(NamedTuple):
    """A template with its inputs filled in."""

    segments: list[str]
    """The text before each output: the prompt, then the text between consecutive outputs."""
    boundaries: list[int]
    """Offsets in ``segments[0]`` where each input's value starts, then its end."""


@dataclass(frozen=True)
class Template:
    """A parsed prompt template: literal text and ``("input"|"output", name)`` slots."""

    pieces: tuple[str | tuple[str, str], ...]

    @classmethod
    def parse(cls, text: str) -> Template:
        pieces: list[str | tuple[str, str]] = []
        pos = 0
        for m in _PLACEHOLDER.finditer(text):
            pieces += [text[pos:m.start()], (m.group(1), m.group(2))]
            pos = m.end()
        pieces.append(text[pos:])
        return cls(tuple(p for p in pieces if p != ""))

    def names(self, kind: str) -> list[str]:
        return list(dict.fromkeys(p[1] for p in self.pieces
                                  if isinstance(p, tuple) and p[0] == kind))

    def render(self, values: dict[str, str]) -> Rendered:
        """Fill the inputs; text after the last output is not part of any prompt."""
        segments, current, boundaries = [], "", []
        for piece in self.pieces:
            if isinstance(piece, str):
                current += piece
            elif piece[0] == "input":
                if not segments:
                    boundaries.append(len(current))
                current += values[piece[1]]
            else:
                segments.append(current)
                current = ""
        boundaries.append(len(segments[0]))
        return Rendered(segments, boundaries)


# --- functions ----------------------------------------------------------------------------
class SemanticFunction:
    """A prompt template bound to a Python signature; calling it submits one request."""

    def __init__(self, fn: Callable[..., Any], params: SamplingParams, chat: bool) -> None:
        self.name = fn.__name__
        self.__doc__ = fn.__doc__
        self.template = Template.parse(inspect.cleandoc(fn.__doc__ or ""))
        self.signature = inspect.signature(fn)
        self.params = params
        self.chat = chat
        self.outputs = self.template.names("output")
        self._check(self.template.names("input"))

    def _check(self, inputs: list[str]) -> None:
        args = list(self.signature.parameters)
        if set(inputs) != set(args):
            raise ValueError(f"{self.name}: template inputs {inputs} must match the "
                             f"parameters {args}")
        if not self.outputs:
            raise ValueError(f"{self.name}: the template has no {{{{output:...}}}} slot")
        if self.chat and len(self.outputs) != 1:
            raise ValueError(f"{self.name}: chat=True takes exactly one output")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Submit a call in the current session; returns the output variable (a tuple of
        them for several outputs). Plain values become constant variables."""
        session = current_session()
        if session is None:
            raise RuntimeError(f"call {self.name}() inside `with SemanticSession(...)` or "
                               "`async with SemanticSession(...)`")
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        inputs = {k: session.as_variable(k, v) for k, v in bound.arguments.items()}
        outputs = session.add_call(self, inputs)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def render_prompt(self, rendered: Rendered, tokenizer: Any) -> str:
        """The first output's prompt; in chat mode, one user turn ready for the answer."""
        if not self.chat:
            return rendered.segments[0]
        messages = [{"role": "user", "content": rendered.segments[0]}]
        return tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                             tokenize=False)


@overload
def semantic_function(fn: Callable[..., Any], /) -> SemanticFunction: ...
@overload
def semantic_function(*, chat: bool = False, **sampling: Any
                      ) -> Callable[[Callable[..., Any]], SemanticFunction]: ...


def semantic_function(fn: Callable[..., Any] | None = None, /, *, chat: bool = False,
                      **sampling: Any) -> Any:
    """Make a semantic function of ``fn``, whose docstring is the prompt template.

    ``sampling`` are :class:`SamplingParams` fields applied to each output (greedy by
    default). ``chat=True`` sends the rendered prompt as one user message through the
    tokenizer's chat template; the output is the assistant's answer. Output values are
    stripped of surrounding whitespace. Usable bare (``@semantic_function``) or called.
    """
    params = SamplingParams(**sampling)

    def wrap(f: Callable[..., Any]) -> SemanticFunction:
        return SemanticFunction(f, params, chat)

    return wrap if fn is None else wrap(fn)
