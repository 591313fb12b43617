"""Tools on the token stream: one session whose tool calls are answered as they are written.

:func:`run_with_tools` runs a prompt as the first call of an :class:`agentrt.session.Session`
with :meth:`ToolStream.engine_hook` as the call's hook, so every sampled token goes through the
parser into the tools while decoding goes on [Conveyor]:

- a call that is rejected while it is written (a tool's ``ToolCallError``, an unknown tool,
  malformed JSON) → the hook answers ``"abort"``: decoding stops at once and the KV is freed
  (its full blocks stay in the prefix cache). The rejection is the observation; the next
  segment starts the session afresh over the same context, mostly served from the prefix cache.
- a call written completely → ``"pause"``: on the local backend the request keeps its KV while
  the tool finishes [InferCept: preserve]; the observation is rendered
  (:func:`render_observation`) and appended as the session's next call — only the appended
  tokens and the last sampled one are prefilled — and decoding continues on the same sequence
  (style rule 14: tool results are appended tokens).

On a backend that cannot pause in place (an SGLang server) the hook runs on the streamed tokens
(:class:`~agentrt.backends.call.Call`): the call ends at the tool call, and the next segment
sends the whole context, which the server's prefix cache serves; :attr:`ToolRun.stats` says
which path ran and how many tokens each segment prefilled. Nothing of the engine is imported at
run time (this module is also loaded in tool worker processes).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from agentrt.agent.parsers import create_parser
from agentrt.agent.parsers.markers import marker_tokenizer
from agentrt.agent.plugin import Observation, Tool
from agentrt.agent.runtime import ToolRuntime
from agentrt.agent.tool_stream import ToolStream

if TYPE_CHECKING:
    from agentrt.backends.call import Call
    from agentrt.chat.formats import Reasoning
    from agentrt.core.outputs import RequestOutput
    from agentrt.core.sampling_params import SamplingParams
    from agentrt.session import Session, SessionStats

__all__ = ["Segment", "ToolRun", "render_observation", "run_with_tools"]

Render = Callable[[Observation, str], str]

# NOTE: ChatML (SmolLM2, Qwen, Hermes); the tool turn follows Hermes (role "tool").
_TOOL_TURN = "<|im_end|>\n<|im_start|>tool\n<tool_response>\n{text}\n</tool_response><|im_end|>\n"
# NOTE: Llama 3.1 / 3.3 Instruct: the call's turn ends, the result is an `ipython` turn whose
# content the template writes as JSON (`tojson`), then the assistant's turn reopens
_LLAMA3_TURN = ("<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n{json}<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\n")
# NOTE: Mistral v0.3 (Nemo: no space after [TOOL_RESULTS]): the call list closes, the call's
# turn ends with </s>, the result goes in as the template writes it (`content|string`, not
# JSON-quoted) with a 9-alphanumeric call id; the model answers right after [/TOOL_RESULTS]
_MISTRAL_TURN = ']</s>[TOOL_RESULTS]{space}{{"content": {text}, "call_id": "{call_id}"}}' \
    "[/TOOL_RESULTS]"
# NOTE: Mistral v13 (Ministral 3, Devstral Small 2): the call's turn ends with </s> right after
# its arguments, the result follows as written; v11's turns name the [CALL_ID] the model wrote
# (not known here): pass render=
_MISTRAL_ARGS_TURN = "</s>[TOOL_RESULTS]{text}[/TOOL_RESULTS]"
# NOTE: Qwen3-Coder: the call's </tool_call> and turn end, the result goes in a user turn
_QWEN_XML_TURN = ("\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n{text}\n"
                  "</tool_response>\n<|im_end|>\n<|im_start|>assistant\n")
_RENDER = {
    "json_toolcall": "</tool_call>" + _TOOL_TURN + "<|im_start|>assistant\n",
    "fenced_code": _TOOL_TURN + "<|im_start|>assistant\n",
    "llama3_json": _LLAMA3_TURN,
    "mistral_json": _MISTRAL_TURN,
    "mistral_args": _MISTRAL_ARGS_TURN,
    "qwen_xml": _QWEN_XML_TURN,
    "react": "\nObservation: {text}\nThought:",
}
_MISTRAL_CALL_ID_LEN = 9
# NOTE: what a render starts with that a call's last token may already have written: a
# Mistral model can write the call's `}` and the list's `]` as one token (`}]`)
_WRITTEN_WITH_CALL = {"mistral_json": "]"}


def render_observation(
    observation: Observation, syntax: str, *, call_id: str | None = None, compact: bool = False,
) -> str:
    """The text appended after a call: the end of the call and a tool turn (ChatML, Llama 3.x,
    Mistral, ReAct), as the model family's chat template writes that turn.

    ``call_id`` is the id a Mistral tool turn names (9 letters or digits, as Mistral's templates
    require; default: derived from the observation, the same for the same one); ``compact``
    writes Mistral Nemo's ``[TOOL_RESULTS]{`` instead of v0.3's ``[TOOL_RESULTS] {`` (pass
    ``render=functools.partial(render_observation, compact=True)``).
    """
    template = _RENDER.get(syntax)
    if template is None:
        raise ValueError(f"no observation format for syntax {syntax!r}; pass render=")
    text = observation.text.rstrip("\n")
    if call_id is None:
        call_id = _call_id(observation)
    elif len(call_id) != _MISTRAL_CALL_ID_LEN or not call_id.isascii() or not call_id.isalnum():
        raise ValueError(f"call_id must be {_MISTRAL_CALL_ID_LEN} ASCII letters or digits "
                         f"(Mistral's templates take no other), got {call_id!r}")
    return template.format(text=text, json=json.dumps(text, ensure_ascii=False),
                           call_id=call_id, space="" if compact else " ")


def _call_id(observation: Observation) -> str:
    """9 hex digits from the observation's tool and text (a Mistral tool turn's call id)."""
    key = f"{observation.tool}\0{observation.text}".encode("utf-8", "surrogatepass")
    digest = hashlib.sha1(key)
    return digest.hexdigest()[:_MISTRAL_CALL_ID_LEN]


@dataclass(frozen=True)
class Segment:
    """One generate / resume segment of the request and the call that ended it."""

    output: RequestOutput
    #: the observation of the call that ended this segment, as appended (cut to fit the context
    #: if it was too long; None: the output ended on its own)
    observation: Observation | None = None
    #: token ids appended after this segment (empty for the last one)
    appended_ids: tuple[int, ...] = ()
    #: the hook paused this segment at a complete call (in place, or on the streamed tokens)
    is_paused: bool = False

    @property
    def is_aborted(self) -> bool:
        """The hook stopped this segment: the call being written was rejected."""
        return self.output.finish_reason == "abort"


@dataclass(frozen=True)
class ToolRun:
    """What :func:`run_with_tools` did: the segments, in order, and every observation."""

    segments: tuple[Segment, ...]
    observations: tuple[Observation, ...]
    #: decode budget left unused by aborted segments: at most this many tokens were saved
    max_tokens_saved: int = 0
    #: a ReAct ``Final Answer:``, if the last segment gave one
    final_answer: str | None = None
    #: the session's counters: the backend, prefilled vs cached tokens, where the hook paused
    stats: SessionStats | None = None

    @property
    def output(self) -> RequestOutput | None:
        """The last segment's output (None if the call was rejected before any decoding)."""
        return self.segments[-1].output if self.segments else None

    @property
    def text(self) -> str:
        """The model's output of all segments, without the appended observations."""
        return "".join(segment.output.text for segment in self.segments)

    @property
    def num_output_tokens(self) -> int:
        return sum(len(segment.output.token_ids) for segment in self.segments)


def run_with_tools(
    backend: Any,
    prompt: str | list[int],
    params: SamplingParams,
    *,
    tools: ToolRuntime | Iterable[Tool | str],
    syntax: str = "json_toolcall",
    session: str | None = None,
    reply_prefix: str = "",
    max_calls: int = 4,
    render: Render = render_observation,
    lazy: bool | None = None,
    namespace: str = "",
    reasoning: Reasoning | None = None,
) -> ToolRun:
    """Generate with tools: calls run while written, rejected ones stop, complete ones pause.

    ``reply_prefix`` is the start of the reply already forced into the prompt (e.g. an opened
    ``<tool_call>``): it is appended to ``prompt`` and fed to the parser before decoding, so a
    call it begins is executed like a decoded one. At most ``max_calls`` observations are
    appended (0: stop at the first call); ``params`` apply to every segment. A ``ToolRuntime``
    passed in stays open; tools given by name or instance get a runtime closed at the end.
    ``backend`` is a :class:`~agentrt.backends.base.Backend` or an :class:`agentrt.Engine`.
    The parser reads markers of ``syntax`` that are special tokens (Mistral's ``[TOOL_CALLS]``)
    as decoded text, and so are the reasoning tags (Magistral's ``[THINK]``); the other special
    tokens are skipped. ``reasoning``: where the output may hold reasoning, whose calls start no
    tool (a :data:`~agentrt.chat.formats.Reasoning` mode; None: from the tokenizer's chat
    template and the prompt, as the chat layer decides it). The parser is the runtime's
    (``ToolStream(parser=syntax)``): JSON calls strict, Qwen3-Coder XML values typed by the
    tools' schemas.

    An observation too long for the model's context is cut (its start kept, with a note) so that
    the next segment still has ``params.max_tokens`` of room: :attr:`Segment.observation` is
    what was appended, :attr:`ToolRun.observations` what the tools returned. (OpenAI's API
    refuses such a request; a run here goes on.)

    ``session`` names the tools' session (their state: the interpreter's globals, a database
    connection) in the runtime. None (the default): a session of this run alone, opened on its
    first call and closed when the run ends, however it ends — two runs at the same time never
    share a tool's state. A name: the runtime's session of that name, kept open after the run so
    the next run with the same name continues it (``runtime.close_session(name)`` ends it); one
    run at a time per name.
    """
    from agentrt.chat.formats import detect_reasoning, reasoning_tags
    from agentrt.session import Session

    if not isinstance(max_calls, int) or max_calls < 0:
        raise ValueError(f"max_calls must be an int >= 0 (0: stop at the first call), "
                         f"got {max_calls!r}")
    chat = Session(backend, namespace=namespace)
    tokenizer = chat.backend.tokenizer
    if isinstance(prompt, str):
        context = _encode(tokenizer, prompt + reply_prefix)
    else:
        context = _encode(tokenizer, prompt) + _encode(tokenizer, reply_prefix)
    if reasoning is None:
        tail = prompt + reply_prefix if isinstance(prompt, str) else \
            tokenizer.decode(context[-32:])
        reasoning = detect_reasoning(tokenizer, tail)
    tags = reasoning_tags(reasoning)
    # NOTE: markers that are special tokens (Mistral's [TOOL_CALLS], Magistral's [THINK])
    # must survive decoding
    markers = create_parser(syntax).markers
    if tags is not None:
        markers = (*markers, tags.open, tags.close)
    decoder = marker_tokenizer(tokenizer, markers) or tokenizer
    tool_session = session if session is not None else f"run-{uuid.uuid4().hex}"
    with ToolStream(decoder, tools, parser=syntax, session=tool_session, lazy=lazy,
                    reasoning=reasoning) as stream:
        try:
            if reply_prefix and stream.feed_text(reply_prefix) == "abort":
                return ToolRun((), tuple(stream.observations))
            loop = _Loop(chat, stream, params, syntax, render)
            return loop.run(context, max_calls)
        finally:
            if session is None:
                stream.runtime.close_session(tool_session)


class _Loop:
    """Drives one session through its segments; frees its KV however it ends."""

    def __init__(
        self, session: Session, stream: ToolStream, params: SamplingParams, syntax: str,
        render: Render,
    ) -> None:
        self.session, self.stream, self.params = session, stream, params
        self.syntax, self.render = syntax, render
        self.segments: list[Segment] = []
        self.max_tokens_saved = 0
        self._num_reported = len(stream.observations)

    def run(self, context: list[int], max_calls: int) -> ToolRun:
        try:
            call = self._generate(context)
            while True:
                out, paused = call.output, _is_paused(call)
                observation = self._end_segment(out)
                if observation is None or len(self.segments) >= max_calls:
                    self.segments.append(Segment(out, observation, is_paused=paused))
                    break
                room = self._max_len() - len(context) - len(out.token_ids) - self.params.max_tokens
                observation, appended = self._fitted(out, observation, paused, room)
                self.segments.append(Segment(out, observation, tuple(appended), paused))
                context = [*context, *out.token_ids, *appended]
                self.stream.begin_segment()
                call = self._generate(context)  # paused in place: only `appended` is new
        finally:
            self.session.close()
        stream = self.stream
        return ToolRun(
            tuple(self.segments), tuple(stream.observations), self.max_tokens_saved,
            stream.final_answer, self.session.stats,
        )

    def _max_len(self) -> int:
        return int(self.session.backend.max_model_len)

    def _fitted(self, out: RequestOutput, observation: Observation, paused: bool,
                room: int) -> tuple[Observation, list[int]]:
        """The observation and its continuation ids, its text cut (with a note) so that the
        continuation takes at most ``room`` tokens and the next segment keeps its
        ``max_tokens``; where even the framing does not fit, the backend refuses as before."""
        appended = self._continuation_ids(out, observation, paused)
        text, full = observation.text, len(observation.text)
        while len(appended) > room and text:
            text = text[: int(len(text) * max(0, room) / len(appended) * 0.9)]
            note = f"\n[... {full - len(text)} characters cut: the observation did not fit " \
                   "the model's context]"
            observation = replace(observation, text=text + note)
            appended = self._continuation_ids(out, observation, paused)
        return observation, appended

    def _continuation(self, out: RequestOutput, observation: Observation, paused: bool) -> str:
        """The rendered observation, less what the paused call's last token already wrote."""
        text = self.render(observation, self.syntax)
        written = _WRITTEN_WITH_CALL.get(self.syntax, "")
        if paused and written and text.startswith(written) and out.text.endswith(written):
            return text[len(written):]
        return text

    def _continuation_ids(self, out: RequestOutput, observation: Observation,
                          paused: bool) -> list[int]:
        """The continuation's token ids: the turn's framing with its special tokens, the tool's
        text as plain text. A tool's output (a web page, a database row) that writes a special
        token's text, ``<|im_end|>\n<|im_start|>system``, must not end the tool turn and
        forge another: where it contains such text, the text is tokenized on its own with
        special tokens split; elsewhere the continuation is tokenized whole, as before."""
        from agentrt.chat.template import added_tokens, encode_plain

        tokenizer = self.session.backend.tokenizer
        text = self._continuation(out, observation, paused)
        if not any(token in observation.text for token in added_tokens(tokenizer)):
            return _encode(tokenizer, text)
        span = _content_span(text, observation, lambda o: self._continuation(out, o, paused))
        if span is None:
            return _encode(tokenizer, text)
        start, end = span
        return [*_encode(tokenizer, text[:start]), *encode_plain(tokenizer, text[start:end]),
                *_encode(tokenizer, text[end:])]

    def _end_segment(self, out: RequestOutput) -> Observation | None:
        """Collect what ended the segment: a rejected or complete call (its observation)."""
        stream = self.stream
        if out.finish_reason == "abort":
            self.max_tokens_saved += max(0, self.params.max_tokens - len(out.token_ids))
        elif not stream.call_complete:
            stream.close()  # the output ended (EOS, stop, length): a call may end or fail here
        stream.observation()  # waits for the tools of this segment's calls
        new = stream.observations[self._num_reported :]
        self._num_reported = len(stream.observations)
        return new[-1] if new else None

    def _generate(self, context: list[int]) -> Call:
        call = self.session.call(context, self.params, hook=self.stream.engine_hook)
        call.generate()
        return call


def _is_paused(call: Call) -> bool:
    """The hook paused ``call`` at a complete tool call (not a stop token or string)."""
    return call.finish_reason == "stop" and call.matched_stop is None \
        and call.hook_path is not None


_SENTINEL = "\ue000agentrt-observation\ue000"  # private-use characters: no template writes them


def _content_span(text: str, observation: Observation,
                  render: Callable[[Observation], str]) -> tuple[int, int] | None:
    """Where the tool's text (as written, or JSON-quoted as Llama 3's turn writes it) lies in
    its rendered turn ``text``; None where a custom render writes it otherwise."""
    probe = render(replace(observation, text=_SENTINEL))
    content = observation.text.rstrip("\n")
    for form in (str, lambda t: json.dumps(t, ensure_ascii=False)):
        start = probe.find(form(_SENTINEL))
        if start != -1 and text.startswith(probe[:start]) and text.startswith(form(content), start):
            return start, start + len(form(content))
    return None


def _encode(tokenizer: Any, text: str | list[int]) -> list[int]:
    if isinstance(text, str):
        return tokenizer.encode(text, add_special_tokens=False) if text else []
    return [int(t) for t in text]
