"""From the engine's token stream to running tools: token ids → text → parser → tool calls.

The engine calls :meth:`ToolStream.on_tokens` with each step's new token ids (its per-request
hook) and gets ``"continue"`` or ``"abort"``; ``"abort"`` means the call being written is already
invalid (unknown tool, malformed JSON, a piece the tool rejected), so decoding it further is
wasted — :attr:`ToolStream.abort_at` says after how many tokens that was decided. When the stream
ends (EOS or a stop string) the engine calls :meth:`ToolStream.close`;
:meth:`ToolStream.observation` then returns what to append to the sequence.
:attr:`ToolStream.call_complete` tells the engine that a call has been fully written (time to
pause the request while the tool finishes). :meth:`ToolStream.engine_hook` is all of that in the
engine's hook signature (``"pause"`` once a call is complete); :meth:`ToolStream.begin_segment`
starts a new output segment after an observation was appended. The engine itself knows nothing
about tools: this adapter only needs ``tokenizer.decode``.

A parser named by its syntax is :func:`~agentrt.agent.parsers.stream_parser`'s, built for the
runtime's tools: JSON calls read strictly (a call that is valid JSON but no valid call —
arguments that are not an object, a second name — is rejected as it is written, never
started), Qwen3-Coder XML values typed by the tools' schemas as the chat layer types them.
With ``reasoning`` (the chat layer's modes: ``"detect"`` / ``"open"`` for ``<think>``,
``"detect_mistral"`` / ``"open_mistral"`` for ``[THINK]``) the text of reasoning blocks never
reaches the parser (:class:`~agentrt.agent.parsers.reasoning.SkipReasoning`): a call the model
only considered starts no tool.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol

from agentrt.agent.parsers import BaseStreamParser, stream_parser
from agentrt.agent.parsers.base import (
    CallEnd,
    CallStart,
    Event,
    FinalAnswer,
    ParseError,
    Piece,
    ToolName,
)
from agentrt.agent.parsers.reasoning import SkipReasoning
from agentrt.agent.plugin import Observation, Tool
from agentrt.agent.runtime import ToolCall, ToolRuntime
from agentrt.core.detokenizer import IncrementalDetokenizer

if TYPE_CHECKING:
    from agentrt.chat.formats import Reasoning

__all__ = ["ToolStream", "arguments_of"]

Decision = Literal["continue", "abort"]
HookDecision = Literal["continue", "pause", "abort"]


def arguments_of(pieces: Iterable[Piece]) -> dict[str, Any]:
    """The complete arguments a call's pieces carried: JSON arguments by key, a ReAct action's
    free-text input under ``"input"`` (partial pieces — deltas, statements — are left out)."""
    args: dict[str, Any] = {}
    for p in pieces:
        if p.kind == "argument" and p.key is not None:
            args[p.key] = p.value
        elif p.kind == "input":
            args["input"] = p.text
    return args


class Tokenizer(Protocol):
    def decode(self, ids: Sequence[int], skip_special_tokens: bool = ...) -> str: ...


class ToolStream:
    """Feeds one request's output into the tools it calls, as it is decoded."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        tools: ToolRuntime | Iterable[Tool | str],
        *,
        parser: str | BaseStreamParser = "json_toolcall",
        session: str = "default",
        lazy: bool | None = None,
        wait_for_tools: bool = False,
        reasoning: Reasoning = "none",
    ) -> None:
        self.runtime = tools if isinstance(tools, ToolRuntime) else ToolRuntime(tools)
        self._owns_runtime = not isinstance(tools, ToolRuntime)
        if isinstance(parser, str):
            specs = [tool.spec() for tool in self.runtime.tools.values()]
            parser = stream_parser(parser, tools=specs)
        self.parser = parser
        if reasoning != "none":
            self.parser = SkipReasoning(self.parser, reasoning)
        self._fresh_parser = copy.deepcopy(self.parser)  # for a new segment after close()
        self.detokenizer = IncrementalDetokenizer(tokenizer)
        self.session, self.lazy = session, lazy
        #: block in on_tokens until the tool has processed every piece sent so far (replays and
        #: tests: makes the abort point deterministic; the engine leaves it off)
        self.wait_for_tools = wait_for_tools
        self.num_tokens = 0
        #: tokens seen when "abort" was first returned (None: never)
        self.abort_at: int | None = None
        self.final_answer: str | None = None
        self.observations: list[Observation] = []
        self._call: ToolCall | None = None
        self._in_call = False
        self._pending: list[Piece] = []
        self._ended: list[ToolCall] = []
        #: every call written completely so far, with the arguments it was given (for callers
        #: that run the observation themselves, e.g. LangChain's executor via offers)
        self.completed: list[tuple[ToolCall, dict[str, Any]]] = []
        self._fed: list[Piece] = []

    @property
    def call_complete(self) -> bool:
        """A call has been written completely and its observation is pending or ready."""
        return bool(self._ended)

    def on_tokens(self, token_ids: Sequence[int]) -> Decision:
        """The engine's per-step hook: feed new tokens; say whether to keep decoding."""
        if self.abort_at is not None or self.parser.is_closed:
            return "abort" if self.abort_at is not None else "continue"
        self.num_tokens += len(token_ids)
        text = self.detokenizer.push(token_ids)
        events = self.parser.feed(text) if text else []
        return self._dispatch(events)

    def engine_hook(self, request: object, token_ids: Sequence[int]) -> HookDecision:
        """The engine's per-request hook (``Engine.generate(..., hook=stream.engine_hook)``).

        ``"abort"`` when the call being written is rejected, ``"pause"`` when a call has been
        written completely (the request keeps its KV while the tool finishes; append the
        observation with ``Engine.resume``), else ``"continue"``. Runs on the engine's thread.
        """
        decision = self.on_tokens(token_ids)
        return "pause" if decision == "continue" and self.call_complete else decision

    def begin_segment(self) -> None:
        """The output continues after appended tokens (an observation): start a new segment.

        Call it after :meth:`observation` has collected the previous segment's calls. The
        appended tokens are not output, so the detokenizer starts over, and the parser restarts
        from a fresh copy of the original (the previous segment may have ended inside a rejected
        call); ``abort_at`` is cleared.
        """
        old = self.detokenizer
        self.detokenizer = IncrementalDetokenizer(
            old.tokenizer, skip_special_tokens=old.skip_special_tokens
        )
        self.parser = copy.deepcopy(self._fresh_parser)
        self.abort_at = None
        self._call, self._in_call, self._pending = None, False, []

    def feed_text(self, text: str) -> Decision:
        """Like :meth:`on_tokens` for already decoded text (tests, non-token backends)."""
        if self.abort_at is not None:
            return "abort"
        return self._dispatch(self.parser.feed(text))

    def close(self) -> Decision:
        """End of the output: flush the detokenizer and the parser, end the last call."""
        if self.abort_at is not None or self.parser.is_closed:
            return "abort" if self.abort_at is not None else "continue"
        text = self.detokenizer.flush()
        events = (self.parser.feed(text) if text else []) + self.parser.close()
        decision = self._dispatch(events)
        if self._in_call and self._call is not None:
            self._fail("the output ended before the tool call was complete")
            return "abort"
        return decision

    def observation(self) -> Observation | None:
        """The latest call's observation (waits for the tool to finish); None if no call."""
        while self._ended:
            self.observations.append(self._ended.pop(0).result())
        return self.observations[-1] if self.observations else None

    def shutdown(self) -> None:
        """Close the runtime if this stream created it."""
        if self._owns_runtime:
            self.runtime.close()

    def _dispatch(self, events: list[Event]) -> Decision:
        for event in events:
            if self._handle(event) == "abort":
                return self._abort()
        call = self._call
        if call is None:
            return "continue"
        if (call.wait() if self.wait_for_tools else call.poll()) is not None:
            self.observations.append(call.abort())
            self._call, self._in_call = None, False
            return self._abort()
        return "continue"

    def _handle(self, event: Event) -> Decision:
        if isinstance(event, CallStart):
            self._in_call, self._call, self._pending = True, None, []
        elif isinstance(event, ToolName):
            if event.name not in self.runtime.tools:
                known = ", ".join(sorted(self.runtime.tools))
                return self._fail(f"unknown tool {event.name!r}; available tools: {known}")
            self._call = self.runtime.start(event.name, session=self.session, lazy=self.lazy)
            for piece in self._pending:
                self._call.feed(piece)
            self._fed, self._pending = list(self._pending), []
        elif isinstance(event, Piece):
            if self._call is not None:
                self._call.feed(event)
                self._fed.append(event)
            else:
                self._pending.append(event)
        elif isinstance(event, CallEnd):
            if self._call is not None:
                self._call.end()
                self._ended.append(self._call)
                self.completed.append((self._call, arguments_of(self._fed)))
            self._call, self._in_call = None, False
        elif isinstance(event, ParseError):
            return self._fail(event.message)
        elif isinstance(event, FinalAnswer):
            self.final_answer = event.text
        return "continue"

    def _fail(self, message: str) -> Decision:
        call, self._call, self._in_call = self._call, None, False
        if call is not None:
            self.observations.append(call.abort(message))
        else:
            self.observations.append(Observation("parser", message, is_error=True))
        return "abort"

    def _abort(self) -> Decision:
        if self.abort_at is None:
            self.abort_at = self.num_tokens
        return "abort"

    def __enter__(self) -> ToolStream:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()
