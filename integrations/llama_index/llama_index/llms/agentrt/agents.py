"""Run LlamaIndex workflow agents as agentrt sessions: KV kept across tool calls.

A ``FunctionAgent`` or ``ReActAgent`` calls the LLM once per step with a prompt that
re-renders the whole history. Inside :func:`agent_session` every call of an ``AgentRT``
continues one session on the LLM's backend (:mod:`agentrt.session`; on the local engine, one
paused-and-resumed request; on an SGLang server, its session): the model's own tokens stay in
the KV cache and each step prefills only what the framework appended — the tool's result,
the next instruction; ``scope.stats`` names the backend and counts what it prefilled. The
scope is a context variable: ``agent.run()`` started inside the block runs its workflow in an
asyncio task created there, which inherits it, and so do the step tasks that task creates.
So the whole run — starting it, reading its events, awaiting its result — belongs inside the
block, which frees the run's KV at its end (a call of the run after the block — the handler
awaited outside it — is a ``RuntimeError``: its KV would be held with no one to free it)::

    with agent_session(agent) as scope:
        handler = agent.run(user_msg="...")
        async for event in handler.stream_events():
            ...
        result = await handler
    scope.stats  # prompt tokens re-rendered vs prefilled

LlamaIndex agents do not always re-render what they sent: a ``ReActAgent`` writes a turn's
reasoning back to memory as one message (its action input as a Python dict), a memory drops
its oldest messages past its token limit. So a call continues the session it shares the
longest prefix with — at least :data:`MIN_SHARED_TOKENS` — however far back the prompts part;
the session rolls the rest back and prefills the new prompt from there.

Given a ``ReActAgent`` on a constrained ``AgentRT`` — or an ``AgentWorkflow``: each of its
ReAct agents, with the ``handoff`` tool the workflow adds — the agent's steps also follow the
ReAct grammar (:mod:`~llama_index.llms.agentrt.react`), so every step parses — after the
reasoning block of a reasoning model (its template read as a chat call reads it). Other calls
in the block (a ``QueryEngineTool``'s synthesis on the same LLM, a memory's summary) do not.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from llama_index.llms.agentrt.base import AgentRT
from llama_index.llms.agentrt.react import react_grammar, react_steps

from agentrt.chat import render_prompt
from agentrt.chat.formats import Reasoning, detect_reasoning
from agentrt.session import SessionScope, agent_run

__all__ = ["MIN_SHARED_TOKENS", "agent_session"]

MIN_SHARED_TOKENS = 64
"""A call shorter in common with every session opens a new one (another agent's call shares
only the chat template's first tokens and must not take over this agent's context)."""


@contextmanager
def agent_session(agent: Any = None) -> Iterator[SessionScope]:
    """A session scope for the agent runs started inside the block (see the module docs);
    ``agent`` (optional: a ``ReActAgent`` or an ``AgentWorkflow``) lets the scope constrain
    its ReAct agents' steps to their tools. ``scope.grammar`` is a lone ReAct agent's."""
    grammars = _react_grammars(agent)
    scope = _AgentScope(min_shared_tokens=MIN_SHARED_TOKENS, seam_slack=sys.maxsize)
    scope.grammar = next(iter(grammars.values())) if len(grammars) == 1 else None
    with react_steps(grammars), agent_run(scope):
        yield scope


class _AgentScope(SessionScope):
    """The scope of an :func:`agent_session`: closed with its block, it opens no session."""

    closed_message = (
        "this agent run's agent_session block has ended: its KV is freed, and a call "
        "now would hold KV no one frees. Start, stream and await the run inside the "
        "block: with agent_session(agent): handler = agent.run(...); await handler")


def _react_grammars(agent: Any) -> dict[str, str]:
    """Each constrained ReAct agent's system header → the grammar of its steps."""
    from llama_index.core.agent.workflow import AgentWorkflow

    if isinstance(agent, AgentWorkflow):
        agents = [(a, _workflow_tools(agent, a)) for a in agent.agents.values()]
    else:
        agents = [(agent, list(getattr(agent, "tools", None) or []))]
    grammars = {}
    for a, tools in agents:
        grammar = _react_grammar_for(a, tools)
        if grammar is not None:
            grammars[a.formatter.format(tools, chat_history=[])[0].content or ""] = grammar
    return grammars


def _workflow_tools(workflow: Any, agent: Any) -> list[Any]:
    """The tools ``workflow`` gives ``agent``'s steps: its own and the handoff tool."""
    tools = list(agent.tools or [])
    if agent.can_handoff_to or agent.can_handoff_to is None:
        # NOTE: AgentWorkflow.get_tools is async; its handoff part is this private helper
        handoff = workflow._get_handoff_tool(agent)
        tools += [handoff] if handoff is not None else []
    return tools


def _react_grammar_for(agent: Any, tools: list[Any]) -> str | None:
    from llama_index.core.agent.workflow import ReActAgent

    if not isinstance(agent, ReActAgent) or not tools or agent.tool_retriever:
        return None  # NOTE: retrieved tools are not known in advance: no grammar
    llm = agent.llm
    if not isinstance(llm, AgentRT) or not llm.constrained:
        return None
    return react_grammar(tools, _reasoning(llm))


def _reasoning(llm: AgentRT) -> Reasoning:
    """The reasoning mode of ``llm``'s calls: its template, and whether a generation prompt
    opens the reasoning block (the same for every chat)."""
    tokenizer = llm.get_backend().tokenizer
    probe = render_prompt(tokenizer, [{"role": "user", "content": "hi"}])
    return detect_reasoning(tokenizer, probe)
