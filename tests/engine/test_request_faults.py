"""A fault inside one request's sampling aborts that request alone, with its error.

Before, a logits processor that raised or a seed that overflowed torch's generator failed
the whole engine step, and the driver aborted every request in flight. Each test here runs
the faulty request next to a well-formed one and checks that the well-formed one decodes
exactly as it does alone, and that the KV pool gets back every block.
"""

from __future__ import annotations

import threading

import pytest
import torch

from agentrt import SamplingParams
from agentrt.core.request import Request
from agentrt.core.sampling_params import MAX_SEED, MIN_SEED
from agentrt.engine.sampler import sample


class RaiseAt:
    """A logits processor that raises at its ``n``-th call (passes the row through before)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.calls = 0

    def __call__(self, output_token_ids: list[int], logits_row: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls >= self.n:
            raise RuntimeError("processor exploded")
        return logits_row


def _overflowing_seed() -> SamplingParams:
    """Sampling params with a seed torch cannot take, past SamplingParams' own check (as a
    caller that builds the dataclass around validation would)."""
    params = SamplingParams(max_tokens=8, temperature=1.0, seed=1)
    object.__setattr__(params, "seed", 2**64)
    return params


@pytest.mark.parametrize("seed", [2**63, 2**64, -(2**63) - 1, 10**30, True, 1.5])
def test_seed_outside_signed_64_bits_is_a_value_error(seed):
    with pytest.raises(ValueError, match=r"seed must be an integer in \[-2\*\*63"):
        SamplingParams(temperature=1.0, seed=seed)


def test_seeds_at_both_ends_of_the_range_sample(engine, chat):
    for seed in (MIN_SEED, MAX_SEED):
        params = SamplingParams(max_tokens=3, temperature=1.0, seed=seed)
        first = engine.generate(chat("Name a color."), params)
        again = engine.generate(chat("Name a color."), params)
        assert first.token_ids == again.token_ids and len(first.token_ids) == 3


def test_sampler_reports_the_failing_row_and_samples_the_others():
    logits = torch.tensor([[0.0, 5.0, 1.0], [3.0, 0.0, 1.0], [0.0, 1.0, 4.0]])
    rows = [Request("ok0", [0], SamplingParams()),
            Request("bad", [0], SamplingParams(logits_processor=RaiseAt(1))),
            Request("ok2", [0], SamplingParams())]
    sampled = sample(logits, rows)
    assert sampled.token_ids[0] == 1 and sampled.token_ids[2] == 2
    assert list(sampled.errors) == [1]
    assert "processor exploded" in str(sampled.errors[1])


def _run_next_to(engine, chat, bad_params: SamplingParams) -> tuple[list[int], BaseException]:
    """Stream a good request and, once it decodes, run one with ``bad_params`` next to it;
    the good one's tokens and what the bad one raised (while the good one still ran)."""
    good_params = SamplingParams(max_tokens=16, ignore_eos=True)
    failure: list[BaseException] = []

    def bad() -> None:
        try:
            engine.generate(chat("Say hi."), bad_params)
        except RuntimeError as exc:
            failure.append(exc)

    thread = threading.Thread(target=bad)
    good: list[int] = []
    failed_midway = False
    for delta in engine.stream(chat("Write a sentence about the sea."), good_params):
        good.extend(delta.token_ids)
        if len(good) == 1:
            thread.start()
        if delta.finished:
            failed_midway = bool(failure)
    thread.join(timeout=120)
    assert failure, "the faulty request did not raise"
    assert failed_midway, "the faulty request did not fail while the good one ran"
    return good, failure[0]


@pytest.mark.parametrize("make_bad", [
    lambda: SamplingParams(max_tokens=8, logits_processor=RaiseAt(3)),
    _overflowing_seed,
], ids=["raising-logits-processor", "overflowing-seed"])
def test_a_faulty_request_fails_alone(engine, chat, make_bad):
    prompt = chat("Write a sentence about the sea.")
    alone = engine.generate(prompt, SamplingParams(max_tokens=16, ignore_eos=True)).token_ids
    engine.clear_prefix_cache()
    free = engine.core.kv.num_free_blocks
    good, failure = _run_next_to(engine, chat, make_bad())
    assert good == alone
    assert "failed" in str(failure) and failure.__cause__ is not None
    engine.clear_prefix_cache()
    assert engine.core.kv.num_free_blocks == free
    assert not engine.core.requests


def test_the_failure_reaches_that_callers_stream(engine, chat):
    params = SamplingParams(max_tokens=8, logits_processor=RaiseAt(2))
    deltas = []
    with pytest.raises(RuntimeError, match="processor exploded") as e:
        for delta in engine.stream(chat("Say hi."), params):
            deltas.append(delta)
    assert len(deltas) == 1 and not deltas[0].finished  # one token, then the fault
    assert isinstance(e.value.__cause__, RuntimeError)
    assert "failed in its sampling" in str(e.value) and "engine failed" not in str(e.value)


def test_engine_survives_a_caller_loop_that_closed_mid_request():
    """An asyncio caller whose event loop closed while its request decoded (anyio.run returning
    after a cancelled call) cannot take the driver thread with it: the orphan is aborted and the
    engine serves on (found by H33: every later request hung)."""
    import asyncio

    from agentrt import Engine

    engine = Engine()  # its own: a regression would kill the driver thread it runs on
    try:
        loop = asyncio.new_event_loop()
        deltas = engine.astream("Count to 500: 1, 2", SamplingParams(max_tokens=200))
        loop.run_until_complete(deltas.__anext__())
        loop.close()  # the caller's loop is gone while its request still decodes
        done = threading.Event()
        threading.Thread(target=lambda: (engine.generate("hi", SamplingParams(max_tokens=2)),
                                         done.set()), daemon=True).start()
        assert done.wait(60), "the engine stopped serving"
        assert not engine.core.requests  # the orphan was aborted, not left decoding
    finally:
        engine.close()
