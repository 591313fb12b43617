"""Reasoning is no call: a parser that never sees the text of ``<think>`` blocks.

Reasoning models think in a block before they answer — Qwen3 style ``<think> … </think>``, or
Magistral's ``[THINK] … [/THINK]`` special tokens; a tool call written there is only
considered, and must never start a tool. :class:`SkipReasoning` wraps the parser of an output
syntax and feeds it the answer text only. The split is the chat layer's own
(:class:`agentrt.chat.tool_calls.ToolCallStream` reading no calls), in the same mode (from
:func:`agentrt.chat.formats.detect_reasoning`), so the tools that start while the model writes
and the final parse agree on what was reasoning — wherever the tags were split. Inside a call
(from the wrapped parser's ``CallStart`` to its ``CallEnd`` or ``ParseError``) the text goes to
the parser as it is, as the chat layer reads a call: a ``<think>`` inside an argument is
argument text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentrt.agent.parsers.base import BaseStreamParser, CallEnd, CallStart, Event, ParseError

if TYPE_CHECKING:
    from agentrt.chat.formats import Reasoning
    from agentrt.chat.tool_calls import ToolCallStream

__all__ = ["SkipReasoning"]


class SkipReasoning(BaseStreamParser):
    """``parser`` fed only what is not reasoning. ``reasoning``: a mode of
    :data:`agentrt.chat.formats.Reasoning` other than ``"none"`` (``"open"`` /
    ``"open_mistral"`` when the prompt opened the block, so the output starts inside it)."""

    def __init__(self, parser: BaseStreamParser, reasoning: Reasoning) -> None:
        from agentrt.chat.formats import reasoning_tags  # NOTE: agentrt.chat imports parsers

        tags = reasoning_tags(reasoning)  # NOTE: ValueError for an unknown mode
        if tags is None:
            raise ValueError("reasoning must be 'detect' or 'open' (or 'detect_mistral', "
                             "'open_mistral'), got 'none'")
        super().__init__()
        self.parser = parser
        self.tags = tags
        self._detect: Reasoning = "detect_mistral" if reasoning.endswith("_mistral") \
            else "detect"  # the same syntax, outside a block
        self._split = _answer_split(reasoning)
        self._in_call = False

    @property
    def markers(self) -> tuple[str, ...]:
        """The parser's markers and the reasoning tags (decoding keeps them all)."""
        return (*self.parser.markers, self.tags.open, self.tags.close)

    def _feed_text(self, text: str) -> list[Event]:
        events: list[Event] = []
        for c in text:  # NOTE: a character at a time: where a call starts, the split stops
            if self._in_call:
                events += self._parse(c)
                continue
            answer = self._split.feed(c).content
            if answer:
                events += self._parse(answer)
        return events

    def _parse(self, text: str) -> list[Event]:
        events = self.parser.feed(text)
        opened = False
        for event in events:
            if isinstance(event, CallStart):
                self._in_call = opened = True
            elif isinstance(event, CallEnd | ParseError):
                self._in_call = False
        if opened:
            # NOTE: a call opened in answer text; what the split still holds (the start of
            # what might have been a reasoning tag) comes after it, and the split starts afresh
            held, self._split = self._split.close().content, _answer_split(self._detect)
            if held:
                events += self._feed_text(held)
        return events

    def _close(self) -> list[Event]:
        held = "" if self._in_call else self._split.close().content
        return (self._parse(held) if held else []) + self.parser.close()


def _answer_split(reasoning: Reasoning) -> ToolCallStream:
    """The chat layer's reader of answer text and reasoning, reading no calls."""
    from agentrt.chat.tool_calls import ToolCallStream  # NOTE: agentrt.chat imports parsers

    return ToolCallStream(reasoning=reasoning, can_call=False)
