"""LlamaIndex's ReAct format as a grammar, so that every step of a ``ReActAgent`` parses.

``ReActAgent`` asks the model (through plain ``chat``, no tools bound) for
``Thought: <one line>`` and then either ``Action: <tool>`` / ``Action Input: <JSON kwargs>``
or ``Answer: <answer>``. A small model breaks that format often, and every break costs an
iteration. :func:`react_grammar` writes the format as an xgrammar structural tag — each
tool's ``Action Input`` is JSON of that tool's schema — and returns it as EBNF, the form
:attr:`agentrt.session.SessionScope.grammar` takes; inside
:func:`~llama_index.llms.agentrt.agent_session` a constrained ``AgentRT`` follows it. A
reasoning model's turn starts with its reasoning block (the rest of the block when the
template opened it; an optional whole one when it may) and the ReAct turn follows it: the
block is reasoning (a ``ThinkingBlock``), the ReAct text the answer the agent parses.

Only the agent's own steps follow it: :func:`react_steps` registers each ReAct agent's
system header (its formatter's, with its tools) for the block, and :func:`step_grammar`
gives a call the grammar of the agent whose header opens its messages — a query engine, a
memory's summary or a structured-output call on the same LLM inside the run answers freely.
"""

from __future__ import annotations

import contextvars
import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from agentrt.chat.formats import Reasoning
from agentrt.chat.grammar import after_reasoning

__all__ = ["react_grammar", "react_steps", "step_grammar"]

_MAX_JSON_WHITESPACE = 1  # NOTE: as in agentrt.chat.grammar: no runaway whitespace
_KEYWORDS = ("Action:", "Answer:")
"""Never in the thought: LlamaIndex's parser reads the first of them as the step's kind (an
"Answer:" in the thought made an action step a final answer)."""

_steps: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar(
    "agentrt_react_steps", default=None)


def react_grammar(tools: Sequence[Any], reasoning: Reasoning = "none") -> str:
    """The EBNF of one ReAct turn with these LlamaIndex tools (needs xgrammar), after the
    reasoning block of the model's ``reasoning`` mode (see :func:`agentrt.chat.prepare_chat`'s
    ``ChatCall.reasoning``)."""
    import xgrammar as xgr

    if not tools:
        raise ValueError("a ReAct grammar needs at least one tool")
    actions = [_action(t.metadata.get_name(), t.metadata.get_parameters_dict()) for t in tools]
    answer = {"type": "sequence", "elements": [
        {"type": "const_string", "value": "Answer: "}, {"type": "any_text"}]}
    thought = {"type": "tag", "begin": "Thought: ",
               "content": {"type": "any_text", "excludes": list(_KEYWORDS)}, "end": "\n"}
    turn = {"type": "sequence",
            "elements": [thought, {"type": "or", "elements": [*actions, answer]}]}
    tag = {"type": "structural_tag", "format": after_reasoning(turn, reasoning)}
    return str(xgr.Grammar.from_structural_tag(json.dumps(tag)))


def _action(name: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tag", "begin": f"Action: {name}\nAction Input: ",
            "content": {"type": "json_schema", "json_schema": parameters,
                        "max_whitespace_cnt": _MAX_JSON_WHITESPACE},
            "end": ""}


@contextmanager
def react_steps(grammars: Mapping[str, str]) -> Iterator[None]:
    """Inside the block a call whose system message is one of ``grammars``' headers (a
    ReAct agent's step) follows that header's grammar (a context variable, as
    :func:`agentrt.session.agent_run`'s scope: the workflow's tasks inherit it)."""
    token = _steps.set(dict(grammars))
    try:
        yield
    finally:
        _steps.reset(token)


def step_grammar(messages: Sequence[Any]) -> str | None:
    """The grammar of a call of ``messages`` (LlamaIndex ``ChatMessage`` s): its ReAct
    agent's, when the first message is the system header of one in :func:`react_steps`."""
    grammars = _steps.get()
    if not grammars or not messages or messages[0].role.value != "system":
        return None
    return grammars.get(messages[0].content or "")
