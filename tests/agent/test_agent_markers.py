"""Tool markers that are special tokens (Mistral's ``[TOOL_CALLS]``) survive decoding: the
marker-keeping tokenizer, ToolStream on token ids, and run_with_tools on a scripted backend
whose tokenizer holds ``[TOOL_CALLS]`` as a special added token."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from agentrt import SamplingParams
from agentrt.agent import ToolRuntime, ToolStream, render_observation, run_with_tools
from agentrt.agent.parsers import create_parser
from agentrt.agent.parsers.markers import MarkerTokenizer, keep_markers
from agentrt.backends import Backend, BackendCapabilities
from agentrt.core.detokenizer import IncrementalDetokenizer
from agentrt.core.model_info import ModelInfo
from agentrt.core.outputs import StreamDelta

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "chat"))
from tiny_tokenizer import mistral_tokenizer  # noqa: E402

CALL = '[TOOL_CALLS] [{"name": "calculator", "arguments": {"expression": "6*7"}}]</s>'


@pytest.fixture(scope="module")
def tokenizer():
    return mistral_tokenizer()


@pytest.fixture(scope="module")
def runtime():
    with ToolRuntime(["calculator"]) as rt:
        yield rt


def test_skipping_special_tokens_keeps_the_marker_and_drops_the_rest(tokenizer):
    ids = tokenizer.encode("[INST] 6*7?[/INST]" + CALL, add_special_tokens=False)
    plain = tokenizer.decode(ids, skip_special_tokens=True)
    assert "[TOOL_CALLS]" not in plain  # what a parser saw before: the call never opens
    view = keep_markers(tokenizer, create_parser("mistral_json").markers)
    assert isinstance(view, MarkerTokenizer)
    kept = view.decode(ids, skip_special_tokens=True)
    assert kept == " 6*7?" + CALL.removesuffix("</s>")  # [INST], [/INST], </s> still skipped
    assert view.decode(ids) == tokenizer.decode(ids)  # without skipping: the tokenizer's own
    streamed = IncrementalDetokenizer(view)  # the engine's and ToolStream's incremental path
    assert "".join(streamed.push([i]) for i in ids) == kept
    assert view.strip_special(tokenizer.decode(ids)) == kept
    assert view.encode("[TOOL_CALLS]", add_special_tokens=False) == list(view.kept_ids)


def test_tokenizers_without_special_markers_are_left_alone(tokenizer):
    assert keep_markers(tokenizer, create_parser("json_toolcall").markers) is tokenizer
    assert keep_markers(tokenizer, create_parser("react").markers) is tokenizer


def test_tool_stream_on_token_ids_runs_the_call_only_with_the_marker_kept(tokenizer, runtime):
    ids = tokenizer.encode(CALL, add_special_tokens=False)
    for decoder, calls in ((tokenizer, 0), (keep_markers(tokenizer, ("[TOOL_CALLS]",)), 1)):
        with ToolStream(decoder, runtime, parser="mistral_json", session="markers") as stream:
            for i in ids:
                stream.on_tokens([i])
            stream.close()
            stream.observation()  # waits for the tools
            assert len(stream.observations) == calls
    assert stream.observations[0].text.strip() == "42"


class ScriptedBackend(Backend):
    """Streams scripted outputs one token a delta, decoded as an engine would (special tokens
    skipped); no pause in place, so a call's hook runs on the streamed tokens."""

    name = "scripted"

    def __init__(self, tokenizer, outputs: Sequence[str]) -> None:
        self._tokenizer, self.outputs = tokenizer, list(outputs)
        self.prompts: list[list[int]] = []

    @property
    def capabilities(self) -> BackendCapabilities:
        return BackendCapabilities(can_pause_in_place=False, keeps_kv_across_calls=False,
                                   kv_held_between_calls=False, prefix_cache=False)

    @property
    def tokenizer(self):
        return self._tokenizer

    @property
    def model_info(self) -> ModelInfo:
        return ModelInfo(name="tiny-mistral", path="", architecture="MistralForCausalLM",
                         max_model_len=4096, vocab_size=len(self._tokenizer),
                         eos_token_ids=(self._tokenizer.eos_token_id,))

    def stream(self, prompt_ids, params=None, *, session_id=None, keep=None,
               options=None) -> Iterator[StreamDelta]:
        self.prompts.append(list(prompt_ids))
        ids = self._tokenizer.encode(self.outputs.pop(0), add_special_tokens=False)
        detok = IncrementalDetokenizer(self._tokenizer, skip_special_tokens=True)
        for n, i in enumerate(ids, 1):
            last = n == len(ids)
            yield StreamDelta("r", detok.push([i]), [i], last, "stop" if last else None,
                              len(prompt_ids))

    async def astream(self, *args, **kwargs):  # pragma: no cover - sync only here
        raise NotImplementedError

    def open_session(self) -> str:
        return "s"

    async def aopen_session(self) -> str:  # pragma: no cover
        return "s"

    def close_session(self, session_id: str) -> None:
        pass

    async def aclose_session(self, session_id: str) -> None:  # pragma: no cover
        pass

    def abort(self, request_id: str) -> None:  # pragma: no cover
        pass

    async def aabort(self, request_id: str) -> None:  # pragma: no cover
        pass


def test_run_with_tools_reads_a_special_token_marker_and_appends_the_results(
        tokenizer, runtime):
    backend = ScriptedBackend(tokenizer, [CALL, " 6*7 is 42.</s>"])
    prompt = tokenizer.encode("<s>[INST] What is 6*7?[/INST]", add_special_tokens=False)
    run = run_with_tools(backend, prompt, SamplingParams(max_tokens=64), tools=runtime,
                         syntax="mistral_json", session="markers", max_calls=1)
    first, second = run.segments
    assert first.is_paused and first.observation.text.strip() == "42"
    # the hook stopped the stream at the call's closing `}`, before `]</s>`
    assert first.output.text == CALL.removeprefix("[TOOL_CALLS]").removesuffix("]</s>")
    appended = tokenizer.decode(list(first.appended_ids))
    assert appended == render_observation(first.observation, "mistral_json")
    assert appended.startswith("]</s>[TOOL_RESULTS] {\"content\": 42, ")
    # the second call's context: prompt, the call as streamed, the appended results
    assert backend.prompts[1] == [*prompt, *first.output.token_ids, *first.appended_ids]
    assert run.text.endswith(" 6*7 is 42.")
