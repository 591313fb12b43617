"""Partial execution inside ``agentrt.Executor``: agentrt tools start while the model writes.

LangChain runs a tool only after the model's whole turn is parsed. When an Executor run's
tools are agentrt tools (:func:`langchain_agentrt.tools.to_langchain`), each model call
of the run also feeds its tokens, as they are decoded, through a
:class:`~agentrt.agent.tool_stream.ToolStream` with the agent's output syntax (ReAct, or
``<tool_call>`` JSON): the tool's worker starts at the tool name and gets each argument as it
completes. The finished call is *offered* to the runtime; when LangChain then runs the tool
with exactly those arguments, it takes the offered result instead of running it again —
anything else, and the offer is aborted. The model's output is never changed (the hook always
answers "continue"), so the run's steps stay those of ``AgentExecutor``. A reasoning model's
``<think>`` block is read as the chat layer reads it (the call's own ``reasoning`` mode): a
call written there was only considered and starts nothing; calls after it start as usual.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentrt.agent.tool_stream import ToolStream
from agentrt.chat.formats import Reasoning, ToolCallFormat, detect_format
from langchain_agentrt.tools import AgentRTTool

__all__ = ["PartialExecution", "partial_execution_for"]


class PartialExecution:
    """One model call's hook: tokens → parser → agentrt tool workers; offers at the end."""

    def __init__(self, tokenizer: Any, runtime: Any, session: str, syntax: str, *,
                 reasoning: Reasoning = "none") -> None:
        self.stream = ToolStream(tokenizer, runtime, parser=syntax, session=session,
                                 reasoning=reasoning)
        self.runtime, self.session = runtime, session

    def __call__(self, request: object, token_ids: Sequence[int]) -> str:
        self.stream.on_tokens(token_ids)  # NOTE: an early "abort" is not acted on: see above
        return "continue"

    def close(self) -> None:
        """The call's output is complete: offer each finished tool call to the runtime."""
        self.stream.close()
        for call, arguments in self.stream.completed:
            self.runtime.offer(call, arguments, session=self.session)


def partial_execution_for(tools: Sequence[Any], syntax: str):
    """A factory of per-call hooks for ``tools``, or None when the tools are not all agentrt
    tools of one runtime and session. The factory takes the engine's tokenizer and the call's
    ``reasoning`` mode, ``tool_format`` (the format the call's tool calls are written in; None:
    the tokenizer's template decides) and ``can_call_tools`` (False: the call binds no tools
    or says ``tool_choice="none"``), and gives the call's hook, or None where JSON tool calls
    cannot be made (text that looks like one is the answer: it must start no tool)."""
    if not tools or not all(isinstance(t, AgentRTTool) for t in tools):
        return None
    runtimes = {id(t.runtime) for t in tools}
    sessions = {t.session for t in tools}
    if len(runtimes) != 1 or len(sessions) != 1:
        return None
    runtime, session = tools[0].runtime, tools[0].session

    def factory(tokenizer: Any, *, reasoning: Reasoning = "none",
                tool_format: ToolCallFormat | None = None,
                can_call_tools: bool = True) -> PartialExecution | None:
        family = syntax
        if syntax == "json_toolcall":
            if not can_call_tools:
                return None
            # NOTE: JSON tool calls are read in the call's format (Hermes, Llama 3, Mistral)
            family = (tool_format or detect_format(tokenizer)).syntax
        return PartialExecution(tokenizer, runtime, session, family, reasoning=reasoning)

    factory.withdraw = lambda: runtime.withdraw(session=session)  # type: ignore[attr-defined]
    return factory
