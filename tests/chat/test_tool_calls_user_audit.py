"""Model output as families write it outside the grammar (a remote backend, constrained=False):
read the same at every cut of the stream."""

from __future__ import annotations

import pytest

from agentrt.chat.formats import MISTRAL
from agentrt.chat.tool_calls import ToolCallStream


def read(text: str, cuts: list[int]) -> tuple[str, list, list]:
    stream, content = ToolCallStream(MISTRAL), ""
    for start, end in zip([0, *cuts], [*cuts, len(text)], strict=True):
        content += stream.feed(text[start:end]).content
    content += stream.close().content
    calls = [(c["name"], c["args"]) for c in stream.tool_calls]
    return content, calls, stream.invalid_tool_calls


@pytest.mark.parametrize("text", [
    '[TOOL_CALLS] {"name": "get_weather", "arguments": {"city": "Paris"}}',
    '[TOOL_CALLS]{"name": "get_weather", "arguments": {"city": "Paris"}}</s>'[:-4],
])
def test_a_mistral_call_written_without_its_list_is_still_a_call(text):
    """Mistral models now and then write one call object after [TOOL_CALLS] without the JSON
    list around it: it was shown as the answer's text, the call lost."""
    for cuts in ([], [5], [13], [14, 30], list(range(1, len(text)))):
        content, calls, invalid = read(text, cuts)
        assert (content, calls, invalid) == ("", [("get_weather", {"city": "Paris"})], []), cuts


@pytest.mark.parametrize("text", [
    '[{"name": "get_weather", "parameters": {"city": "Paris"}}, '
    '{"name": "get_weather", "parameters": {"city": "Rome"}}]',
    '[{"name": "get_weather", "parameters": {"city": "Paris"}},{"name": "get_weather", '
    '"parameters": {"city": "Rome"}}]',
])
def test_llama3_calls_written_as_a_json_list_are_calls(text):
    """Llama 3.x models without a grammar sometimes write parallel calls as one JSON list:
    the answer's text was '[, ]' around the calls."""
    from agentrt.chat.formats import LLAMA3

    for cuts in ([], [1], [2, 60], list(range(1, len(text)))):
        stream, content = ToolCallStream(LLAMA3), ""
        for start, end in zip([0, *cuts], [*cuts, len(text)], strict=True):
            content += stream.feed(text[start:end]).content
        content += stream.close().content
        calls = [(c["name"], c["args"]) for c in stream.tool_calls]
        assert content == "" and not stream.invalid_tool_calls, cuts
        assert calls == [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome"})]


def test_a_bracket_that_opens_no_call_stays_text():
    from agentrt.chat.formats import LLAMA3

    for text in ("[1, 2] and [x]", "see [{'a': 1}]", "["):
        stream = ToolCallStream(LLAMA3)
        content = "".join(stream.feed(c).content for c in text) + stream.close().content
        assert content == text and not stream.tool_calls
