"""Bad input raises a clear exception and leaves the engine usable."""

from __future__ import annotations

import json
import time

import pytest

from agentrt import Engine, ModelNotFoundError, SamplingParams, UnsupportedModelError


def test_bad_requests_raise_and_engine_survives(engine, chat):
    free = engine.core.kv.num_free_blocks
    with pytest.raises(ValueError, match="empty"):
        engine.generate("", SamplingParams(max_tokens=4))
    with pytest.raises(ValueError, match="context"):
        engine.generate([1] * (engine.core.max_model_len + 5), SamplingParams(max_tokens=4))
    for bad in (0, -3):
        with pytest.raises(ValueError, match="max_tokens"):
            SamplingParams(max_tokens=bad)
    with pytest.raises(ValueError, match="token ids"):
        engine.generate([10**7], SamplingParams(max_tokens=2))
    assert engine.core.kv.num_free_blocks == free
    out = engine.generate(chat("Say hello."), SamplingParams(max_tokens=4))
    assert out.token_ids


def test_unknown_model_path():
    with pytest.raises(ModelNotFoundError, match="not found"):
        Engine("/nonexistent/model-folder")


def test_unsupported_architecture(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_layer": 2,
        "n_head": 2, "n_embd": 8, "vocab_size": 10}))
    with pytest.raises(UnsupportedModelError, match="GPT2LMHeadModel"):
        Engine(str(tmp_path))


def test_raising_hook_aborts_only_its_request(engine, chat):
    def broken(req, tokens):
        raise RuntimeError("tool crashed")

    params = SamplingParams(max_tokens=6)
    bad = engine.submit(chat("Say hi."), params, hook=broken)
    good = engine.generate(chat("Say hi."), params, namespace="hook-good")
    deadline = time.monotonic() + 60
    while not bad.status.is_finished and time.monotonic() < deadline:
        time.sleep(0.01)
    assert bad.finish_reason == "abort" and "tool crashed" in str(bad.stop_reason)
    assert good.finish_reason in ("stop", "length") and good.token_ids


def test_bad_prompt_in_a_batch_submits_nothing(engine, chat):
    free = engine.core.kv.num_free_blocks
    with pytest.raises(ValueError, match="empty"):
        engine.generate([chat("Say hi."), ""], SamplingParams(max_tokens=4))
    assert not engine.core.requests
    assert engine.core.kv.num_free_blocks == free
