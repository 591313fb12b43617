"""ReAct text (``Action:`` / ``Action Input:`` / ``Final Answer:``) as written for LangChain agents.

Follows LangChain's ``ReActSingleInputOutputParser``: an ``Action:`` line names the tool (emitted at
once, so the tool's worker can warm up), the ``Action Input:`` runs until a line that starts with
``Observation`` (LangChain's stop sequence, recognised as soon as the word is complete),
``Thought:``, ``Action:`` or ``Final Answer:``, or the end of the output; it is stripped of spaces
and double quotes like LangChain does. ``Final Answer:`` collects the rest of the output. An action
without input, or an action and a final answer in one output, is a :class:`ParseError`.
"""

from __future__ import annotations

import re
from typing import Literal

from agentrt.agent.parsers.base import (
    BaseStreamParser,
    CallEnd,
    CallStart,
    Event,
    FinalAnswer,
    LineBuffer,
    ParseError,
    Piece,
    ToolName,
)

__all__ = ["ReActParser"]

_ACTION = re.compile(r"^\s*Action\s*\d*\s*:\s*(.*?)\s*$")
_INPUT = re.compile(r"^\s*Action\s*\d*\s*Input\s*\d*\s*:[ \t]*(.*)$", re.DOTALL)
_FINAL = re.compile(r"^\s*Final Answer\s*:[ \t]*(.*)$", re.DOTALL)
_ENDS_INPUT = re.compile(r"^\s*(Observation|Thought\s*:|Action\s*\d*\s*:|Final Answer\s*:)")
_OBSERVATION = "Observation"

State = Literal["idle", "want_input", "input", "final"]


class ReActParser(BaseStreamParser):
    """Streams ReAct actions; each action is one call with a single ``input`` piece."""

    syntax = "react"

    def __init__(self) -> None:
        super().__init__()
        self._lines = LineBuffer()
        self._state: State = "idle"
        self._input: list[str] = []
        self._final: list[str] = []
        self._had_action = False

    def _feed_text(self, text: str) -> list[Event]:
        events: list[Event] = []
        for line in self._lines.push(text):
            events += self._line(line)
        partial = self._lines.partial
        if self._state == "input" and partial.lstrip().startswith(_OBSERVATION):
            events += self._end_input()  # the stop word is complete: no need to see its line end
            self._state = "idle"
        return events

    def _close(self) -> list[Event]:
        rest = self._lines.take_rest()
        events = self._line(rest) if rest else []
        if self._state == "input":
            events += self._end_input()
        elif self._state == "want_input":
            events.append(ParseError("invalid ReAct output: 'Action:' without 'Action Input:'"))
        elif self._state == "final":
            events.append(FinalAnswer("".join(self._final).strip()))
        self._state = "idle"
        return events

    def _line(self, line: str) -> list[Event]:
        if self._state == "final":
            self._final.append(line)
            return []
        if self._state == "input":
            if not _ENDS_INPUT.match(line):
                self._input.append(line)
                return []
            events = self._end_input()
            self._state = "idle"
            return events + self._line(line)
        return self._header(line)

    def _header(self, line: str) -> list[Event]:
        if self._state == "want_input":
            found = _INPUT.match(line)
            if found:
                self._state, self._input = "input", [found.group(1)]
                return []
            if not line.strip():
                return []
            self._state = "idle"
            return [ParseError("invalid ReAct output: 'Action:' without 'Action Input:'")]
        final = _FINAL.match(line)
        if final:
            if self._had_action:
                return [ParseError("invalid ReAct output: both an action and a final answer")]
            self._state, self._final = "final", [final.group(1)]
            return []
        action = _ACTION.match(line)
        if action:
            self._state, self._had_action = "want_input", True
            return [CallStart(self.syntax), ToolName(action.group(1))]
        return []

    def _end_input(self) -> list[Event]:
        text = "".join(self._input).strip(" \t\r\n").strip('"')
        self._input = []
        return [Piece("input", text), CallEnd()]
