"""Whitespace after a tool call, in every format: no answer text when the end or another call
follows, kept when text follows; the same at every cut."""

from __future__ import annotations

import pytest

from agentrt.chat.formats import MISTRAL
from agentrt.chat.tool_calls import ToolCallStream


@pytest.mark.parametrize(("after", "content"), [
    ("\n", ""),  # a Mistral list of calls, then a line break and the end: was content "\n"
    ("\n\n" + MISTRAL.format_calls([("g", {})]) + " \n", ""),  # a second list follows
    ("\nDone.", "\nDone."),  # text follows: its whitespace is kept
    ("\n[TOOL", "\n[TOOL"),  # a partial marker at the end is text
])
def test_whitespace_after_a_mistral_list_is_no_answer_at_any_cut(after, content):
    text = MISTRAL.format_calls([("f", {"a": 1})]) + after
    for cut in range(len(text) + 1):
        stream = ToolCallStream(MISTRAL)
        outs = [stream.feed(text[:cut]), stream.feed(text[cut:]), stream.close()]
        assert "".join(o.content for o in outs) == content, cut
        assert [c["name"] for c in stream.tool_calls][:1] == ["f"]
