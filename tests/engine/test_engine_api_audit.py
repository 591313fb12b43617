"""The Python engine API as a vLLM / SGLang user drives it (audit H36).

``Engine.generate / stream / agenerate / astream``, ``SamplingParams`` and the output pair,
checked for what a user of vLLM's ``LLM.generate`` and ``AsyncLLMEngine.generate`` relies on:
order, seeds, streaming equal to the whole answer, cancellation that frees the request, bad
input that is a clear error in the caller, and the differences from vLLM the docstrings name.
Generations are short (max_tokens <= 16) on the session engine; one engine of its own is
closed here.
"""

from __future__ import annotations

import asyncio
import copy
import math
import pickle
import signal
import threading
import time

import pytest

from agentrt import DEFAULT_MODEL, Engine, RequestOutput, SamplingParams, StreamDelta

PROMPTS = ["The capital of France is", "1, 2, 3,", "Once upon a time"]
SEEDED = SamplingParams(max_tokens=10, temperature=1.0, seed=7)


def _settled(engine: Engine, timeout: float = 30.0) -> None:
    """Wait until nothing runs or waits (an abort from another thread lands between steps)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        load = engine.load()
        if not (load.num_running or load.num_waiting or engine.core.requests):
            return
        time.sleep(0.02)
    raise AssertionError(f"requests still in the engine: {list(engine.core.requests)}")


# --- defects: SamplingParams ----------------------------------------------------------------
@pytest.mark.parametrize(("field", "value"), [
    ("max_tokens", True),
    ("temperature", math.nan),
    ("temperature", math.inf),
    ("logprobs", True),
    ("logprobs", 1.5),
    ("logprobs", "1"),
    ("ignore_eos", "no"),
    ("skip_special_tokens", "no"),
    ("stop_token_ids", 12),
    ("extra", "x"),
])
def test_wrong_sampling_values_are_value_errors_naming_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        SamplingParams(**{field: value})


def test_none_stop_lists_mean_none_as_in_vllm():
    params = SamplingParams(stop=None, stop_token_ids=None, extra=None)
    assert params.stop == () and params.stop_token_ids == () and params.extra == {}
    assert params == SamplingParams()


def test_top_k_minus_one_is_off_as_in_vllm_and_sglang():
    assert SamplingParams(top_k=-1) == SamplingParams(top_k=0)
    with pytest.raises(ValueError, match="top_k"):
        SamplingParams(top_k=-2)


def test_max_tokens_none_says_how_to_run_to_the_context():
    with pytest.raises(ValueError, match="max_model_len"):
        SamplingParams(max_tokens=None)


def test_a_tiny_temperature_is_greedy(engine):
    greedy = engine.generate(PROMPTS[0], SamplingParams(max_tokens=4))
    tiny = engine.generate(PROMPTS[0], SamplingParams(max_tokens=4, temperature=1e-40, seed=1))
    assert tiny.token_ids == greedy.token_ids and tiny.finish_reason == "length"


# --- defects: Engine ------------------------------------------------------------------------
def test_logprobs_beyond_the_vocabulary_fail_at_submit(engine):
    vocab = engine.model_info.vocab_size
    with pytest.raises(ValueError, match="logprobs"):
        engine.generate("Hi", SamplingParams(max_tokens=2, logprobs=vocab + 1))
    assert not engine.core.requests
    out = engine.generate("Hi", SamplingParams(max_tokens=2, logprobs=3))
    assert len(out.logprobs) == 2 and all(len(lp) in (3, 4) for lp in out.logprobs)


@pytest.mark.parametrize("params", [{"max_tokens": 2}, 5, "greedy", [SamplingParams()] * 2])
def test_params_of_another_type_are_a_type_error(engine, params):
    with pytest.raises(TypeError, match="SamplingParams"):
        engine.generate("Hi", params)
    with pytest.raises(TypeError, match="SamplingParams"):  # the core checks it too
        engine.core.add_request("Hi", params)
    assert not engine.core.requests


def test_the_core_refuses_what_the_front_door_refuses(engine):
    """``LLMEngine`` callers (backends, sessions) get the same checks as ``Engine``'s."""
    vocab = engine.core.model_config.vocab_size
    with pytest.raises(ValueError, match="vocabulary"):
        engine.core.add_request("Hi", SamplingParams(max_tokens=2, logprobs=vocab + 1))
    with pytest.raises(TypeError, match="prompt"):
        engine.core.add_request(None)
    assert not engine.core.requests


def test_one_request_id_for_a_batch_is_a_clear_error(engine):
    with pytest.raises(ValueError, match="a batch of 2 prompts"):
        engine.generate(PROMPTS[:2], SamplingParams(max_tokens=2), request_id="audit-batch")
    assert not engine.core.requests


@pytest.mark.parametrize("prompts", [None, 3, {"prompt": "Hi"}, 1.5, ["Hi", None]])
def test_prompts_of_another_type_are_a_type_error(engine, prompts):
    with pytest.raises(TypeError, match="prompt"):
        engine.generate(prompts, SamplingParams(max_tokens=2))
    assert not engine.core.requests


async def test_agenerate_bad_prompt_in_a_batch_submits_nothing(engine):
    with pytest.raises(ValueError, match="context"):
        await engine.agenerate([PROMPTS[0], "hi " * (engine.max_model_len + 5)],
                               SamplingParams(max_tokens=16, ignore_eos=True))
    assert not engine.core.requests  # before: the good prompt decoded on, unread


async def test_cancelled_agenerate_batch_aborts_every_request(engine):
    aborted = engine.stats.num_aborted
    task = asyncio.create_task(engine.agenerate(
        PROMPTS, SamplingParams(max_tokens=16, ignore_eos=True)))
    while not engine.core.requests:
        await asyncio.sleep(0.005)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    _settled(engine)
    assert engine.stats.num_aborted == aborted + len(PROMPTS)


class _Interrupt:
    """A Ctrl-C in the main thread while its request decodes: the request's hook, on its first
    token, signals the main thread and waits until the signal handler raised there."""

    def __init__(self) -> None:
        self.raised = threading.Event()
        self.sent = False
        self.main = threading.main_thread().ident

    def handler(self, signum, frame):
        self.raised.set()
        raise KeyboardInterrupt

    def hook(self, request, new_tokens):
        if not self.sent:
            self.sent = True
            signal.pthread_kill(self.main, signal.SIGUSR1)
            self.raised.wait(10)
        return None


@pytest.mark.parametrize("batch", [False, True])
def test_interrupted_generate_aborts_its_requests(engine, batch):
    interrupt = _Interrupt()
    previous = signal.signal(signal.SIGUSR1, interrupt.handler)
    aborted = engine.stats.num_aborted
    prompts = PROMPTS if batch else PROMPTS[0]
    try:
        with pytest.raises(KeyboardInterrupt):
            engine.generate(prompts, SamplingParams(max_tokens=16, ignore_eos=True),
                            hook=interrupt.hook)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    _settled(engine)  # before: the interrupted requests decoded on to max_tokens, unread
    assert engine.stats.num_aborted == aborted + (len(PROMPTS) if batch else 1)


def test_stats_is_a_snapshot(engine):
    before = engine.stats
    engine.generate("Hi", SamplingParams(max_tokens=2))
    after = engine.stats
    assert after.num_finished == before.num_finished + 1  # before: one live object
    assert after.num_decode_tokens == before.num_decode_tokens + 1


def test_engine_repr_names_model_and_state(engine):
    shown = repr(engine)
    assert shown.startswith("Engine(") and (engine.config.model or DEFAULT_MODEL) in shown
    assert "max_model_len=" in shown and "closed" not in shown


# --- already right: pinned ------------------------------------------------------------------
def test_batch_keeps_order_and_equals_each_alone(engine):
    params = SamplingParams(max_tokens=6)
    alone = [engine.generate(p, params) for p in PROMPTS]
    batch = engine.generate(PROMPTS, params)
    assert [o.token_ids for o in batch] == [o.token_ids for o in alone]
    ids = engine.generate([engine.encode(p) for p in PROMPTS], params)
    assert [o.text for o in ids] == [o.text for o in alone]
    assert engine.generate(tuple(PROMPTS[:1]), params)[0].text == alone[0].text


def test_empty_and_too_long_prompts_are_clear_errors_and_the_engine_serves_on(engine,
                                                                              tiny_model):
    for prompt in ("", [], [""]):
        with pytest.raises(ValueError, match="empty"):
            engine.generate(prompt, SamplingParams(max_tokens=2))
    # NOTE: the context checks on a tiny model with a 64-token context: filling the default
    # model's 8,192 tokens took ~55 s of prefill and checks nothing more
    with Engine(tiny_model, dtype="float32", max_model_len=64) as short:
        with pytest.raises(ValueError, match="context holds 64"):
            short.generate([1] * short.max_model_len, SamplingParams(max_tokens=2))
        out = short.generate([1] * (short.max_model_len - 1), SamplingParams(max_tokens=4))
        assert len(out.token_ids) == 1 and out.finish_reason == "length"  # the context is full
        assert not short.core.requests
        assert short.generate("Hi", SamplingParams(max_tokens=1)).finish_reason == "length"
    with pytest.raises(ValueError, match=f"context holds {engine.max_model_len}"):
        engine.generate([1] * engine.max_model_len, SamplingParams(max_tokens=2))
    assert engine.generate("Hi", SamplingParams(max_tokens=1)).finish_reason == "length"


def test_seeds_reproduce_across_calls_and_ignore_batch_neighbours(engine):
    first = engine.generate(PROMPTS[2], SEEDED).token_ids
    assert engine.generate(PROMPTS[2], SEEDED).token_ids == first
    batch = engine.generate([PROMPTS[0], PROMPTS[2], PROMPTS[1], PROMPTS[2]], SEEDED)
    assert batch[1].token_ids == batch[3].token_ids == first


async def test_streams_concatenate_to_the_whole_answer(engine):
    whole = engine.generate(PROMPTS[2], SEEDED)
    sync = list(engine.stream(PROMPTS[2], SEEDED))
    deltas = [d async for d in engine.astream(PROMPTS[2], SEEDED)]
    for stream in (sync, deltas):
        assert all(isinstance(d, StreamDelta) for d in stream)
        folded = RequestOutput.from_deltas(stream)
        assert (folded.text, folded.token_ids) == (whole.text, whole.token_ids)
        assert folded.finish_reason == whole.finish_reason == "length"
    assert (await engine.agenerate(PROMPTS[2], SEEDED)).token_ids == whole.token_ids


async def test_leaving_an_async_stream_frees_its_request(engine):
    params = SamplingParams(max_tokens=16, ignore_eos=True)
    aborted = engine.stats.num_aborted
    stream = engine.astream(PROMPTS[0], params)
    async for _ in stream:
        break
    await stream.aclose()
    assert not engine.core.requests
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(engine.agenerate(PROMPTS[1], params), 0.05)
    _settled(engine)
    assert engine.stats.num_aborted == aborted + 2
    assert len((await engine.agenerate(PROMPTS[0], params)).token_ids) == 16


def test_leaving_a_sync_stream_frees_its_request(engine):
    stream = engine.stream(PROMPTS[0], SamplingParams(max_tokens=16, ignore_eos=True))
    next(stream)
    stream.close()
    assert not engine.core.requests


def test_threads_share_the_engine(exact_engine):
    """On the exact path: threads batch their requests together, and only the exact path is
    batch-invariant (the integer path's batched kernels sum in another order than batch 1)."""
    engine = exact_engine
    params = SamplingParams(max_tokens=6)
    alone = {p: engine.generate(p, params).token_ids for p in PROMPTS}
    got: dict[str, list[int]] = {}
    threads = [threading.Thread(target=lambda p=p: got.__setitem__(
        p, engine.generate(p, params).token_ids)) for p in PROMPTS]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert got == alone


def test_sampling_params_compare_hash_copy_and_pickle():
    a = SamplingParams(max_tokens=8, stop=["\n", "END"], stop_token_ids=[2], seed=3,
                       temperature=0.7, extra={"user": "x"})
    b = SamplingParams(max_tokens=8, stop=("\n", "END"), stop_token_ids=(2,), seed=3,
                       temperature=0.7)
    assert a == b and hash(a) == hash(b)  # extra (and logits_processor) are not compared
    assert pickle.loads(pickle.dumps(a)) == a == copy.deepcopy(a)
    assert SamplingParams(stop="END").stop == ("END",)
    with pytest.raises(TypeError, match="'n'"):
        SamplingParams(n=2)  # one completion per request: the docstring says so
    for cls in (SamplingParams, RequestOutput, StreamDelta, Engine):
        assert "vLLM" in (cls.__doc__ or ""), cls


def test_chat_layer_equals_generate_on_the_rendered_template(engine):
    from agentrt.chat import prepare_chat, run_deltas

    messages = [{"role": "user", "content": "Name a colour."}]
    call = prepare_chat(engine, messages, max_tokens=8)
    via_chat = RequestOutput.from_deltas(run_deltas(call))
    prompt = engine.tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                  tokenize=False)
    assert via_chat.token_ids == engine.generate(prompt, SamplingParams(max_tokens=8)).token_ids
    with pytest.raises(ValueError, match="role"):
        prepare_chat(engine, [{"role": "wizard", "content": "hi"}])


def test_a_closed_engine_refuses_work_and_ends_its_requests():
    with Engine(dtype="float32") as own:
        assert own.generate("Hi", SamplingParams(max_tokens=2)).token_ids
        got: dict[str, RequestOutput] = {}
        started = threading.Event()

        def hook(request, tokens):
            started.set()

        worker = threading.Thread(target=lambda: got.__setitem__("out", own.generate(
            PROMPTS[0], SamplingParams(max_tokens=1000, ignore_eos=True), hook=hook)))
        worker.start()
        assert started.wait(60)
    worker.join(30)
    # NOTE: 1000 tokens take seconds, the close a few steps: the request is cut, not done
    assert got["out"].finish_reason == "abort" and len(got["out"].token_ids) < 1000
    assert "closed" in repr(own)
    for call in (lambda: own.generate("Hi"), lambda: next(own.stream("Hi")),
                 lambda: asyncio.run(own.agenerate("Hi"))):
        with pytest.raises(RuntimeError, match="closed"):
            call()
    own.close()  # twice is fine
