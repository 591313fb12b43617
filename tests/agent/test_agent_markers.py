"""Tool markers that are special tokens (Mistral's ``[TOOL_CALLS]``) survive decoding: the
marker-keeping tokenizer, ToolStream on token ids, and run_with_tools on a scripted backend
whose tokenizer holds ``[TOOL_CALLS]`` as a special added token."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from agentrt import SamplingParams
from agentrt.agent import ToolRuntime, ToolStream, render_observation, run_with_tools
from agentrt.agent.parsers import create_parser
from agentrt.agent.parsers.markers import MarkerTokenizer, marker_tokenizer
from agentrt.core.detokenizer import IncrementalDetokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "chat"))
from tiny_mistral import ScriptedBackend, mistral_tokenizer  # noqa: E402

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
    view = marker_tokenizer(tokenizer, create_parser("mistral_json").markers)
    assert isinstance(view, MarkerTokenizer)
    kept = view.decode(ids, skip_special_tokens=True)
    assert kept == " 6*7?" + CALL.removesuffix("</s>")  # [INST], [/INST], </s> still skipped
    assert view.decode(ids) == tokenizer.decode(ids)  # without skipping: the tokenizer's own
    streamed = IncrementalDetokenizer(view)  # the engine's and ToolStream's incremental path
    assert "".join(streamed.push([i]) for i in ids) == kept
    assert view.strip_special(tokenizer.decode(ids)) == kept
    assert view.encode("[TOOL_CALLS]", add_special_tokens=False) == list(view.kept_ids)


def test_tokenizers_without_special_markers_are_left_alone(tokenizer):
    assert marker_tokenizer(tokenizer, create_parser("json_toolcall").markers) is None
    assert marker_tokenizer(tokenizer, create_parser("react").markers) is None


def test_tool_stream_on_token_ids_runs_the_call_only_with_the_marker_kept(tokenizer, runtime):
    ids = tokenizer.encode(CALL, add_special_tokens=False)
    for decoder, calls in ((tokenizer, 0), (marker_tokenizer(tokenizer, ("[TOOL_CALLS]",)), 1)):
        with ToolStream(decoder, runtime, parser="mistral_json", session="markers") as stream:
            for i in ids:
                stream.on_tokens([i])
            stream.close()
            stream.observation()  # waits for the tools
            assert len(stream.observations) == calls
    assert stream.observations[0].text.strip() == "42"


@pytest.mark.parametrize("merges", [(), (("}", "]"),)], ids=["}", "}]"])
def test_run_with_tools_reads_a_special_token_marker_and_appends_the_results(merges, runtime):
    tokenizer = mistral_tokenizer(merges=merges)
    backend = ScriptedBackend(tokenizer, [CALL, " 6*7 is 42.</s>"])
    prompt = tokenizer.encode("<s>[INST] What is 6*7?[/INST]", add_special_tokens=False)
    run = run_with_tools(backend, prompt, SamplingParams(max_tokens=64), tools=runtime,
                         syntax="mistral_json", session="markers", max_calls=1)
    first, second = run.segments
    assert first.is_paused and first.observation.text.strip() == "42"
    # the hook stopped the stream at the token that ended the call: `}`, or `}]` that also
    # closed the list (then the list is not closed twice)
    call_text = CALL.removeprefix("[TOOL_CALLS]").removesuffix("]</s>")
    assert first.output.text == call_text + ("]" if merges else "")
    appended = tokenizer.decode(list(first.appended_ids))
    assert first.output.text + appended == \
        call_text + render_observation(first.observation, "mistral_json")
    assert re.search(r'</s>\[TOOL_RESULTS\] \{"content": 42, "call_id": "[0-9a-f]{9}"\}'
                     r"\[/TOOL_RESULTS\]$", appended)
    # the second call's context: prompt, the call as streamed, the appended results
    assert backend.prompts[1] == [*prompt, *first.output.token_ids, *first.appended_ids]
    assert run.text.endswith(" 6*7 is 42.")


@pytest.mark.parametrize("reasoning", [None, "detect"])
def test_run_with_tools_starts_no_call_written_while_thinking(reasoning, runtime):
    """A template that knows ``<think>``: the call the model only considered runs no tool (the
    mode detected as the chat layer detects it, or given); the call after it does."""
    tokenizer = mistral_tokenizer()
    tokenizer.chat_template = "{% for m in messages %}{{ m.content }}{% endfor %}<think>\n"
    thought = ('<think>perhaps [TOOL_CALLS] [{"name": "calculator", "arguments": '
               '{"expression": "1+1"}}]? no.</think>')
    backend = ScriptedBackend(tokenizer, [thought + CALL, " 6*7 is 42.</s>"])
    run = run_with_tools(backend, "<s>[INST] What is 6*7?[/INST]", SamplingParams(max_tokens=160),
                         tools=runtime, syntax="mistral_json", session="thinking", max_calls=1,
                         reasoning=reasoning)
    first = run.segments[0]
    assert first.is_paused and first.observation.text.strip() == "42"
    assert first.output.text.startswith("<think>perhaps ")  # the thought was written
