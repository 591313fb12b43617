"""A hook that runs on the streamed tokens (a backend that cannot pause in place, like SGLang)
and ends a call inside a many-token delta: the kept tokens are re-decoded as the call's params
say, so a special-token tool marker (Mistral's ``[TOOL_CALLS]``) survives when kept."""

from __future__ import annotations

import pytest
from tiny_mistral import ScriptedBackend, mistral_tokenizer

from agentrt import SamplingParams
from agentrt.backends.call import Call
from agentrt.core.options import RequestOptions
from agentrt.core.outputs import StreamDelta

OUTPUT = '[TOOL_CALLS] [{"name": "f", "arguments": {}}]</s>'


class OneDeltaBackend(ScriptedBackend):
    """Streams the whole scripted output as one delta, as a server's batched chunk arrives."""

    def stream(self, prompt_ids, params=None, *, session_id=None, keep=None, options=None):
        deltas = list(super().stream(prompt_ids, params, session_id=session_id, keep=keep,
                                     options=options))
        ids = [t for d in deltas for t in d.token_ids]
        yield StreamDelta("r", "".join(d.text for d in deltas), ids, True, "stop",
                          len(prompt_ids))


def pause_after(n: int):
    seen = []

    def hook(_request, tokens):
        seen.extend(tokens)
        return "pause" if len(seen) == n else None
    return hook


@pytest.mark.parametrize("skip", [False, True])
def test_a_client_side_pause_mid_delta_decodes_as_the_params_say(skip):
    tokenizer = mistral_tokenizer()
    backend = OneDeltaBackend(tokenizer, [OUTPUT])
    call = Call(backend, tokenizer.encode("hi", add_special_tokens=False),
                SamplingParams(max_tokens=64, skip_special_tokens=skip),
                options=RequestOptions(hook=pause_after(5)))
    deltas = list(call.stream())
    assert call.hook_path == "client"
    assert len(deltas) == 1 and deltas[0].finish_reason == "stop"
    kept = deltas[0].token_ids
    assert len(kept) == 5 and kept[0] == tokenizer.convert_tokens_to_ids("[TOOL_CALLS]")
    text = deltas[0].text
    assert text == tokenizer.decode(kept, skip_special_tokens=skip)
    assert text.startswith("[TOOL_CALLS]") is (not skip)
