"""The ReAct format as a grammar, so a ReAct agent's every step parses.

LangChain's ReAct agents (``create_react_agent``, and the legacy MRKL ``ZeroShotAgent``)
expect each model turn to continue ``Thought:`` with one line of thought and then either
``Action: <tool>`` / ``Action Input: <input>`` (cut at the ``\\nObservation`` stop, or the
legacy agents' ``\\nObservation:``) or
``Final Answer: <answer>``. A small model breaks that format most of the time, and every
break costs an iteration. When :class:`~langchain_agentrt.Executor` runs such an agent with
a constrained :class:`~langchain_agentrt.ChatAgentRT`, decoding follows this grammar: the
action names one of the agent's tools, and the parser never fails.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

__all__ = ["REACT_TEMPLATE", "is_react_agent", "react_grammar", "react_prompt"]

REACT_TEMPLATE = (
    "Answer the following questions as best you can. You have access to the following "
    "tools:\n\n{tools}\n\nUse the following format:\n\nQuestion: the input question you must "
    "answer\nThought: you should always think about what to do\nAction: the action to take, "
    "should be one of [{tool_names}]\nAction Input: the input to the action\nObservation: the "
    "result of the action\n... (this Thought/Action/Action Input/Observation can repeat N "
    "times)\nThought: I now know the final answer\nFinal Answer: the final answer to the "
    "original input question\n\nBegin!\n\nQuestion: {input}\nThought:{agent_scratchpad}")
"""The classic ReAct prompt (``hwchase17/react`` on the LangChain hub), shipped so that it
works offline."""


def react_prompt() -> Any:
    """:data:`REACT_TEMPLATE` as a LangChain ``PromptTemplate`` for ``create_react_agent``."""
    from langchain_core.prompts import PromptTemplate

    return PromptTemplate.from_template(REACT_TEMPLATE)


def react_grammar(tool_names: Sequence[str]) -> str:
    """GBNF for one ReAct turn after ``Thought:`` with these tools."""
    if not tool_names:
        raise ValueError("a ReAct grammar needs at least one tool name")
    tools = " | ".join(json.dumps(name) for name in tool_names)
    return "\n".join([
        'root ::= thought "\\n" (action | final)',
        "thought ::= [^\\n]{0,120}",  # NOTE: bounded, so max_tokens rarely cuts a turn
        # NOTE: an action ends where the agent's stop cuts it: "\nObservation" (create_react_agent)
        # and "\nObservation:" (ZeroShotAgent) both match this text, so neither leaves it behind
        'action ::= "Action: " tool "\\nAction Input: " line "\\nObservation:"',
        f"tool ::= {tools}",
        'final ::= "Final Answer: " line',
        "line ::= [^\\n]+",
    ])


def is_react_agent(agent: Any) -> bool:
    """Whether ``agent`` (an ``AgentExecutor.agent``) parses LangChain's ReAct format."""
    from langchain_classic.agents.mrkl.output_parser import MRKLOutputParser
    from langchain_classic.agents.output_parsers import ReActSingleInputOutputParser

    parsers = (ReActSingleInputOutputParser, MRKLOutputParser)
    if isinstance(getattr(agent, "output_parser", None), parsers):
        return True
    steps = getattr(getattr(agent, "runnable", None), "steps", ())
    return any(isinstance(step, parsers) for step in steps)
