"""The per-request options object, the grammar spec and the output pair (no model needed)."""

from __future__ import annotations

import pytest

from agentrt.core.options import RequestOptions
from agentrt.core.outputs import RequestOutput, StreamDelta
from agentrt.core.request import Pause
from agentrt.core.sampling_params import Grammar, SamplingParams


def test_options_fields_and_pause_implies_keep_kv():
    opts = RequestOptions(forced_token_ids=[3, 4], pause=Pause("search", 1.0))
    assert opts.forced_token_ids == (3, 4) and opts.keeps_kv and not opts.keep_kv
    assert not RequestOptions().keeps_kv


def test_options_of_applies_keywords_on_top():
    base = RequestOptions(namespace="a", keep_kv=True)
    merged = RequestOptions.of(base, request_id="r1", keep_kv=False)
    assert (merged.namespace, merged.request_id, merged.keep_kv) == ("a", "r1", False)
    assert RequestOptions.of(base) is base


def test_options_reject_bad_input():
    with pytest.raises(TypeError, match="unknown request option.*keepkv"):
        RequestOptions.of(keepkv=True)
    with pytest.raises(ValueError, match="depth"):
        RequestOptions(depth=-1)
    with pytest.raises(TypeError, match="request_id"):
        RequestOptions(request_id=7)  # type: ignore[arg-type]


def test_grammar_is_validated():
    g = Grammar("regex", "[0-9]+")
    assert SamplingParams(grammar=g).grammar == g
    with pytest.raises(ValueError, match="kind must be one of"):
        Grammar("lark", "start: x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="non-empty"):
        Grammar("ebnf", "")
    with pytest.raises(TypeError, match="must be a Grammar"):
        SamplingParams(grammar="root ::= x")  # type: ignore[arg-type]


def test_stops_are_strings_and_token_ids():
    assert SamplingParams(stop="Paris").stop == ("Paris",)
    assert SamplingParams(stop=["a", "b"], stop_token_ids=[0, 7]).stop_token_ids == (0, 7)
    for bad in ([1], ["ok", None], [b"bytes"]):
        with pytest.raises(ValueError, match="stop must be a string or a list of strings"):
            SamplingParams(stop=bad)  # type: ignore[arg-type]
    for bad in (["2"], [-1], [True], [1.5]):
        with pytest.raises(ValueError, match="stop_token_ids must be token ids"):
            SamplingParams(stop_token_ids=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(("field", "value"), [
    ("temperature", "hot"), ("temperature", None), ("top_p", "1"), ("top_k", 2.5),
    ("top_k", True)])
def test_sampling_numbers_of_the_wrong_type_are_value_errors(field, value):
    with pytest.raises(ValueError, match=f"{field} must be"):
        SamplingParams(**{field: value})


def test_from_deltas_folds_a_stream():
    deltas = [StreamDelta("r", "Hel", [1], num_prompt_tokens=10, num_cached_tokens=4),
              StreamDelta("r", "lo", [2, 3], num_prompt_tokens=10, num_cached_tokens=4),
              StreamDelta("r", "", [9], True, "stop", 10, 4, matched_stop=9)]
    out = RequestOutput.from_deltas(deltas)
    assert (out.request_id, out.text, out.token_ids) == ("r", "Hello", [1, 2, 3, 9])
    assert (out.finish_reason, out.matched_stop, out.stop_reason) == ("stop", 9, 9)
    assert (out.num_prompt_tokens, out.prompt_len, out.num_cached_tokens) == (10, 10, 4)
    assert out.num_prefill_tokens == 6


def test_from_deltas_of_an_unfinished_stream_has_no_finish():
    out = RequestOutput.from_deltas([StreamDelta("r", "a", [1], num_prompt_tokens=2)])
    assert out.finish_reason is None and out.matched_stop is None and out.text == "a"
    assert RequestOutput.from_deltas([]).token_ids == []


def test_stream_deltas_carry_the_logprobs_generate_returns(engine):
    """Each delta's ``logprobs`` are its tokens'; folded, they are ``generate``'s."""
    from agentrt import RequestOutput, SamplingParams

    params = SamplingParams(max_tokens=5, logprobs=2, ignore_eos=True)
    deltas = list(engine.stream("The sky is", params))
    assert all(len(d.logprobs) == len(d.token_ids) for d in deltas if d.token_ids)
    whole = engine.generate("The sky is", params)
    assert RequestOutput.from_deltas(deltas).logprobs == whole.logprobs
    assert all(d.logprobs is None for d in engine.stream("The sky is",
                                                         SamplingParams(max_tokens=2)))
