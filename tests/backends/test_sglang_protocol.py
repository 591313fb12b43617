"""SGLang's wire format as the client speaks it: sampling params out, answers in (no server)."""

from __future__ import annotations

import pytest

from agentrt import SamplingParams
from agentrt.backends.sglang_protocol import (
    ChunkParser,
    SGLangError,
    generate_body,
    is_router_info,
    parse_payload,
    sampling_params,
)


def test_sampling_params_use_sglang_names():
    params = SamplingParams(max_tokens=7, temperature=0.5, top_p=0.9, top_k=0, seed=3,
                            stop=("\n",), stop_token_ids=(2,), ignore_eos=True,
                            extra={"sglang": {"no_stop_trim": True, "min_p": 0.1}})
    assert sampling_params(params) == {
        "max_new_tokens": 7, "temperature": 0.5, "top_p": 0.9, "top_k": -1,
        "ignore_eos": True, "skip_special_tokens": True, "stop": ["\n"],
        "stop_token_ids": [2], "sampling_seed": 3, "no_stop_trim": True, "min_p": 0.1}
    body = generate_body([1, 2], SamplingParams(), rid="r", stream=True,
                         session_params={"id": "s", "rid": None})
    assert body["input_ids"] == [1, 2] and body["rid"] == "r" and body["stream"] is True
    assert body["session_params"] == {"id": "s", "rid": None}


def test_what_cannot_travel_is_refused():
    with pytest.raises(ValueError, match="LogitsProcessor"):
        sampling_params(SamplingParams(logits_processor=lambda ids, row: row))
    with pytest.raises(ValueError, match="logprobs"):
        sampling_params(SamplingParams(logprobs=2))


def _out(text: str, ids: list[int], n: int, reason=None) -> dict:
    return {"text": text, "output_ids": ids,
            "meta_info": {"id": "r", "completion_tokens": n, "prompt_tokens": 5,
                          "cached_tokens": 3, "finish_reason": reason}}


@pytest.mark.parametrize("incremental", [False, True])
def test_streamed_answers_become_deltas(incremental):
    parser = ChunkParser("r")
    answers = [_out("He", [10], 1), _out("Hello", [10, 11] if not incremental else [11], 2),
               _out("Hello!", [10, 11, 2] if not incremental else [2], 3,
                    {"type": "stop", "matched": 2})]
    chunks = [parser.chunk(a) for a in answers]
    assert [c.text for c in chunks] == ["He", "llo", "!"]
    assert [c.token_ids for c in chunks] == [[10], [11], [2]]
    assert chunks[-1].finished and chunks[-1].finish_reason == "stop"
    assert chunks[-1].matched_stop == 2 and chunks[-1].num_cached_tokens == 3


def test_finish_reasons_and_errors():
    parser = ChunkParser("r")
    chunk = parser.chunk(_out("x", [5], 1, {"type": "abort", "message": "Aborted"}))
    assert chunk.finish_reason == "abort"
    assert ChunkParser("r").chunk(_out("x", [5], 1, {"type": "length", "length": 1})) \
        .finish_reason == "length"
    with pytest.raises(SGLangError, match="boom"):
        parse_payload('{"error": {"message": "boom"}}')


def test_a_router_is_told_from_a_server():
    assert is_router_info({"router_manager": True, "workers_count": 2})
    assert is_router_info(None)
    assert not is_router_info({"version": "0.5.8", "model_path": "m"})
