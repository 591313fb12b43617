"""Engine: the front door. Sync and async generate/stream over one driver thread.

A single background thread owns the :class:`LLMEngine` and steps it while any request is
unfinished, so concurrent callers — threads, asyncio tasks, the HTTP server — share one
continuously batched loop. Callers submit under a lock and receive :class:`StepUpdate`s
through a per-request subscriber; bad input raises in the caller before anything is queued.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import queue
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import aclosing
from typing import Any

from agentrt.config import EngineConfig
from agentrt.core.model_info import ModelInfo
from agentrt.core.openmp import release_openmp_pool
from agentrt.core.options import RequestOptions
from agentrt.core.request import Request
from agentrt.core.sampling_params import SamplingParams
from agentrt.engine.grammar import with_grammar_processor
from agentrt.engine.llm_engine import LLMEngine, is_prompt
from agentrt.engine.output_processor import StepUpdate, make_update
from agentrt.engine.outputs import EngineLoad, EngineStats, RequestOutput, StreamDelta
from agentrt.intercept import CostModel
from agentrt.models import DEFAULT_MODEL

_log = logging.getLogger(__name__)

__all__ = ["Engine"]

Prompt = str | list[int]


class Engine:
    """A local LLM engine: paged KV cache, radix prefix sharing, continuous batching.

    >>> engine = Engine()                       # the embedded SmolLM2-135M-Instruct
    >>> engine.generate("The capital of France is", SamplingParams(max_tokens=8)).text

    Keyword arguments are :class:`EngineConfig` fields (``dtype``, ``kv_cache_gb``,
    ``block_size``, ``max_num_seqs``, ``max_num_batched_tokens``, ...). Nothing is downloaded
    unless asked: ``Engine("Qwen/Qwen3-4B-GGUF:Q4_K_M", download=True)`` pulls a hub model
    that is not in the local Hugging Face cache first (as ``agentrt pull`` does).

    Every call takes per-request ``options`` (:class:`~agentrt.core.options.RequestOptions`)
    or its fields as keywords (``keep_kv=True``, ``hook=...``), applied on top of it.

    Safe to call from many threads and event loops at once; ``with Engine() as engine:``
    closes it. Where vLLM's ``LLM`` / ``AsyncLLMEngine`` differ:

    - ``generate`` takes one prompt (text or token ids) and returns one
      :class:`RequestOutput`, or a list and returns a list in the same order; an empty
      list is an empty token-id prompt (a ``ValueError``), not an empty batch;
    - there is no ``chat()``: :mod:`agentrt.chat` is the chat layer
      (``run_deltas(prepare_chat(engine, messages, max_tokens=...))``: validated messages,
      tools, response formats; message text is encoded as text). Generating from
      ``engine.tokenizer.apply_chat_template(messages, add_generation_prompt=True,
      tokenize=False)`` gives the same tokens for plain messages, but message text that
      spells a special token (``<|im_end|>``) becomes that token: not for untrusted text;
    - ``astream`` yields :class:`StreamDelta` (the new text), not cumulative outputs;
      leaving it, or cancelling an ``agenerate``, aborts the request;
    - a bad prompt or parameter raises in the caller (``ValueError`` / ``TypeError``) and
      queues nothing of the call; an interrupted ``generate`` aborts its requests.
    """

    def __init__(self, model: str | None = None, *, config: EngineConfig | None = None,
                 download: bool = False, **options: Any) -> None:
        if config is None:
            config = EngineConfig(model=model, **options)
        elif model is not None or options:
            raise ValueError("pass either config= or model/options, not both")
        if download:
            from agentrt.models.pull import ensure_model

            ensure_model(config.model)
        self.core = LLMEngine(config)
        release_openmp_pool()  # the loading thread's workers would slow the engine thread
        self._lock = threading.RLock()
        self._wake = threading.Condition(self._lock)
        self._subscribers: dict[str, Callable[[StepUpdate | BaseException], None]] = {}
        self._closed = False
        self._thread = threading.Thread(target=self._drive, name="agentrt-engine", daemon=True)
        self._thread.start()

    # --- properties ------------------------------------------------------------------------
    @property
    def tokenizer(self):
        """The model's Hugging Face tokenizer (chat template included)."""
        return self.core.tokenizer

    @property
    def config(self) -> EngineConfig:
        """The configuration the engine was built with (``"auto"`` fields unresolved; see
        its ``resolved_*`` properties)."""
        return self.core.config

    @property
    def model_info(self) -> ModelInfo:
        """The loaded model: name, path, architecture, context and vocabulary limits."""
        return self.core.model_info

    @property
    def cost_model(self) -> CostModel:
        """The cost model the interception and scheduling policies use now (T_fwd fitted on
        this machine, refined while the engine runs)."""
        return self.core.cost

    @property
    def cuda_graph_batch_sizes(self) -> tuple[int, ...]:
        """The decode batch sizes captured as CUDA graphs (empty: eager)."""
        graphs = self.core.runner.graphs
        return () if graphs is None else graphs.batch_sizes

    @property
    def max_model_len(self) -> int:
        """Most tokens one sequence can hold (prompt + generated)."""
        return self.core.max_model_len

    def encode(self, text: str | list[int]) -> list[int]:
        """Token ids of ``text`` (no special tokens added); token ids pass through."""
        return self.core.encode(text)

    def decode(self, token_ids: list[int], *, skip_special_tokens: bool = False) -> str:
        """The text of ``token_ids`` (special tokens kept unless ``skip_special_tokens``)."""
        return self.core.decode(token_ids, skip_special_tokens=skip_special_tokens)

    @property
    def stats(self) -> EngineStats:
        """A snapshot of the engine-wide counters since start, read between two steps (later
        steps do not change it: subtract two snapshots for a window)."""
        with self._lock:
            return copy.deepcopy(self.core.stats)

    def __repr__(self) -> str:
        closed = ", closed" if self._closed else ""
        return (f"Engine(model={self.config.model or DEFAULT_MODEL!r}, "
                f"device={self.config.resolved_device!r}, "
                f"max_model_len={self.max_model_len}{closed})")

    def load(self) -> EngineLoad:
        """The scheduler's queues, the paused requests and the KV pools, read between two
        steps (a consistent view; waits for the step in flight)."""
        core = self.core
        with self._lock:
            host = core.kv.host_pool
            return EngineLoad(
                num_running=len(core.scheduler.running),
                num_waiting=len(core.scheduler.waiting),
                num_free_blocks=core.kv.pool.num_free,
                num_evictable_blocks=core.kv.cache.num_evictable_blocks,
                num_total_blocks=core.kv.pool.num_blocks,
                num_paused=len(core.interceptions.paused),
                num_free_host_blocks=host.num_free if host is not None else 0,
                num_total_host_blocks=host.num_blocks if host is not None else 0,
            )

    # --- generate ---------------------------------------------------------------------------
    def generate(self, prompts: Prompt | list[Prompt], params: SamplingParams | None = None,
                 options: RequestOptions | None = None, **fields: Any
                 ) -> RequestOutput | list[RequestOutput]:
        """Generate for one prompt (text or token ids) or a batch; blocks until done.

        A batch is admitted at once (all or nothing on bad input) and answered in its order.
        ``options`` and keyword ``fields`` as in :meth:`submit` (``keep_kv``, ``namespace``,
        ``hook``, ...). An exception while waiting (``KeyboardInterrupt``) aborts the
        requests not yet answered.
        """
        batch, single = _prompt_batch(prompts)
        queues: list[queue.Queue] = [queue.Queue() for _ in batch]
        reqs = self._submit_batch(batch, params, RequestOptions.of(options, **fields),
                                  [q.put for q in queues])
        outs = self._wait(reqs, queues)
        return outs[0] if single else outs

    async def agenerate(self, prompts: Prompt | list[Prompt],
                        params: SamplingParams | None = None,
                        options: RequestOptions | None = None, **fields: Any):
        """Async twin of :meth:`generate` (cancelling it aborts its requests)."""
        batch, single = _prompt_batch(prompts)
        await self._acompile_grammar(params)
        pairs = [_async_queue() for _ in batch]
        reqs = self._submit_batch(batch, params, RequestOptions.of(options, **fields),
                                  [sub for _, sub in pairs])
        tasks = [asyncio.ensure_future(self._aoutput(req, q))
                 for req, (q, _) in zip(reqs, pairs, strict=True)]
        try:
            outs = list(await asyncio.gather(*tasks))
        except BaseException:
            for task in tasks:  # NOTE: gather leaves the others running; each aborts its own
                task.cancel()
            self._abort_all(reqs)  # and those already answered may be paused, holding KV
            raise
        return outs[0] if single else outs

    def stream(self, prompt: Prompt, params: SamplingParams | None = None,
               options: RequestOptions | None = None, **fields: Any) -> Iterator[StreamDelta]:
        """Yield text deltas (never a broken UTF-8 character) as tokens are generated.

        Every delta carries the segment's ``num_prompt_tokens`` and ``num_cached_tokens``;
        the last one its ``finish_reason`` and ``matched_stop``. Closing the iterator early
        aborts the request.
        """
        q: queue.Queue = queue.Queue()
        req = self.submit(prompt, params, options, subscriber=q.put, **fields)
        yield from self._stream_queue(req, q)

    async def astream(self, prompt: Prompt, params: SamplingParams | None = None,
                      options: RequestOptions | None = None, **fields: Any
                      ) -> AsyncIterator[StreamDelta]:
        """Async twin of :meth:`stream`; closing the iterator early (``aclose()``, or
        ``contextlib.aclosing`` around an ``async for`` that breaks) aborts the request."""
        await self._acompile_grammar(params)
        q, sub = _async_queue()
        req = self.submit(prompt, params, options, subscriber=sub, **fields)
        async with aclosing(self._adeltas(req, q)) as deltas:  # NOTE: abort on our aclose
            async for delta in deltas:
                yield delta

    # --- continuation ------------------------------------------------------------------------
    def resume_stream(self, request_id: str, appended: Prompt,
                      params: SamplingParams | None = None,
                      options: RequestOptions | None = None, **kwargs: Any
                      ) -> Iterator[StreamDelta]:
        """:meth:`resume`, streamed like :meth:`stream` (closing early aborts the request)."""
        q: queue.Queue = queue.Queue()
        req = self._submit_resume(request_id, appended, params, options, q.put, kwargs)
        yield from self._stream_queue(req, q)

    async def aresume_stream(self, request_id: str, appended: Prompt,
                             params: SamplingParams | None = None,
                             options: RequestOptions | None = None, **kwargs: Any
                             ) -> AsyncIterator[StreamDelta]:
        """Async twin of :meth:`resume_stream`."""
        await self._acompile_grammar(params)
        q, sub = _async_queue()
        req = self._submit_resume(request_id, appended, params, options, sub, kwargs)
        async with aclosing(self._adeltas(req, q)) as deltas:
            async for delta in deltas:
                yield delta

    def resume(self, request_id: str, appended: Prompt, params: SamplingParams | None = None,
               options: RequestOptions | None = None, **kwargs: Any) -> RequestOutput:
        """Continue a paused request (``keep_kv=True``) with appended text or token ids.

        Only the appended tokens (and the last generated token, whose KV no step has
        computed yet) are prefilled; the rest of the context's KV is reused — or, if the
        interception policy moved it meanwhile, swapped back in or recomputed from what the
        prefix cache kept. ``options``, ``truncate_to`` and option fields as keywords
        (``keep_kv``, ``forced_token_ids``, ``pause``, ``hook``): see
        :meth:`LLMEngine.resume`.
        """
        q: queue.Queue = queue.Queue()
        req = self._submit_resume(request_id, appended, params, options, q.put, kwargs)
        return self._wait([req], [q])[0]

    async def aresume(self, request_id: str, appended: Prompt,
                      params: SamplingParams | None = None,
                      options: RequestOptions | None = None, **kwargs: Any) -> RequestOutput:
        """Async twin of :meth:`resume`."""
        await self._acompile_grammar(params)
        q, sub = _async_queue()
        req = self._submit_resume(request_id, appended, params, options, sub, kwargs)
        return await self._aoutput(req, q)

    def set_interception(self, request_id: str, kind: str,
                         expected_duration: float | None = None) -> None:
        """Say what a paused request waits for (see :meth:`LLMEngine.set_interception`)."""
        with self._lock:
            self.core.set_interception(request_id, kind, expected_duration)

    def clear_prefix_cache(self) -> int:
        """Evict every prefix-cache entry no request is using; returns blocks released."""
        with self._lock:
            return self.core.clear_prefix_cache()

    def release(self, request_id: str) -> None:
        """Free the KV of a paused request."""
        with self._lock:
            self.core.release(request_id)
            self._wake.notify()  # freed memory may let a waiting request in

    def abort(self, request_id: str) -> None:
        """Abort a request wherever it is; its subscriber gets a final ``abort`` update."""
        with self._lock:
            req = self.core.abort(request_id)
            sub = self._subscribers.pop(request_id, None)
            self._wake.notify()
            update = None if req is None else make_update(req, [], "", True)
        if update is not None and sub is not None:
            self._deliver(request_id, sub, update)

    # --- low level --------------------------------------------------------------------------
    def submit(self, prompt: Prompt, params: SamplingParams | None = None,
               options: RequestOptions | None = None, *,
               subscriber: Callable[[StepUpdate | BaseException], None] | None = None,
               **fields: Any) -> Request:
        """Queue a request; ``subscriber`` is called from the driver thread with every update
        (a :class:`StepUpdate`, whose ``error`` is set where this request's sampling failed;
        an exception where the whole step did). A subscriber that raises -- say its caller's
        event loop closed -- loses its request: it is aborted, and the engine serves on.

        ``options`` (:class:`~agentrt.core.options.RequestOptions`), with keyword ``fields``
        applied on top, go to :meth:`LLMEngine.add_request`. Frees the calling thread's
        OpenMP pool, if its torch work left one (:mod:`agentrt.core.openmp`): while it
        exists, the driver thread's parallel regions lose their spin-wait.
        """
        release_openmp_pool()
        self.compile_grammar(params)
        with self._lock:
            self._check_open()
            req = self.core.add_request(prompt, params, options, **fields)
            if subscriber is not None:
                self._subscribers[req.request_id] = subscriber
            self._wake.notify()
        return req

    def _submit_resume(self, request_id, appended, params, options, subscriber,
                       kwargs) -> Request:
        release_openmp_pool()  # as in submit()
        self.compile_grammar(params)
        with self._lock:
            self._check_open()
            req = self.core.resume(request_id, appended, params, options, **kwargs)
            self._subscribers[req.request_id] = subscriber
            self._wake.notify()
        return req

    def _submit_batch(self, batch: list[Prompt], params: SamplingParams | None,
                      opts: RequestOptions, subscribers: list[Callable[[Any], None]]
                      ) -> list[Request]:
        """Submit every prompt of ``batch`` in one admission, or none (a bad one raises)."""
        if opts.request_id is not None and len(batch) > 1:
            raise ValueError(f"request_id={opts.request_id!r} names one request; a batch of "
                             f"{len(batch)} prompts takes none (each gets its own)")
        reqs: list[Request] = []
        self.compile_grammar(params)
        with self._lock:
            try:
                for prompt, sub in zip(batch, subscribers, strict=True):
                    reqs.append(self.submit(prompt, params, opts, subscriber=sub))
            except Exception:
                for req in reqs:
                    self.abort(req.request_id)
                raise
        return reqs

    def compile_grammar(self, params: SamplingParams | None) -> None:
        """Compile ``params.grammar`` (if any) now, on the calling thread, for this engine's
        tokenizer; a ``ValueError`` if it does not compile. A request submitted with it then
        finds it in xgrammar's cache. The engine calls this itself before taking its lock,
        so a slow compile (seconds for a json_schema with a long ``maxLength``) stalls no
        other request's steps; call it on a worker thread to keep an event loop free too
        (the async methods do). Params of another type are left to the request's checks."""
        if isinstance(params, SamplingParams) and params.grammar is not None:
            with_grammar_processor(params, self.core)

    async def _acompile_grammar(self, params: SamplingParams | None) -> None:
        """:meth:`compile_grammar` on a worker thread: the caller's event loop runs on."""
        if isinstance(params, SamplingParams) and params.grammar is not None:
            await asyncio.to_thread(self.compile_grammar, params)

    def close(self) -> None:
        """Stop the driver thread, aborting unfinished requests."""
        with self._lock:
            self._closed = True
            self._wake.notify()
        self._thread.join(timeout=10)
        for rid in list(self.core.requests):
            self.abort(rid)

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- driver -----------------------------------------------------------------------------
    def _drive(self) -> None:
        while True:
            with self._lock:
                while not self._closed and not self.core.has_unfinished():
                    self._wake.wait()
                if self._closed:
                    return
                try:
                    updates = self.core.step()
                except Exception as exc:  # noqa: BLE001 - surfaced to every waiting caller
                    self._fail_all(exc)
                    continue
                if self.core.last_step_idle:
                    # NOTE: nothing could run (memory held by paused requests): wait for a
                    # resume, release or abort instead of spinning
                    self._wake.wait(timeout=0.005)
                deliveries = [(u.request.request_id, self._subscribers.get(u.request.request_id),
                               u) for u in updates]
                for u in updates:
                    if u.finished:
                        self._subscribers.pop(u.request.request_id, None)
            for rid, sub, u in deliveries:
                if sub is not None:
                    self._deliver(rid, sub, u)

    def _deliver(self, request_id: str, sub: Callable[[Any], None], item: Any) -> None:
        """Hand ``item`` to a request's subscriber, never at the driver thread's cost: where
        the subscriber raises (an asyncio caller whose event loop has closed), the request has
        no one left to read it and is aborted, freeing its KV."""
        try:
            sub(item)
        except Exception as exc:  # noqa: BLE001 - the caller's failure, not the engine's
            _log.warning("request %s: its subscriber raised %s: %s; the request is aborted",
                         request_id, type(exc).__name__, exc)
            with self._lock:
                self._subscribers.pop(request_id, None)
                self.core.abort(request_id)
                self._wake.notify()

    def _fail_all(self, exc: BaseException) -> None:
        """A step raised outside any one request's sampling (those fail alone, see
        :meth:`LLMEngine.step`): abort everything in flight (freeing its KV) and tell the
        callers."""
        for rid in list(self.core.requests):
            self.core.abort(rid)
        subs, self._subscribers = self._subscribers, {}
        for rid, sub in subs.items():
            try:
                sub(exc)
            except Exception:  # noqa: BLE001 - that caller is gone; tell the others
                _log.warning("request %s: its subscriber raised on the engine's failure", rid)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the engine is closed")

    # --- collecting updates --------------------------------------------------------------------
    def _wait(self, reqs: list[Request], queues: list[queue.Queue]) -> list[RequestOutput]:
        """The outputs of ``reqs``, in order; whatever interrupts the wait (Ctrl-C, one
        request's failure) aborts them all: the caller gets none of their ids."""
        outs: list[RequestOutput] = []
        try:
            for req, q in zip(reqs, queues, strict=True):
                for _ in self._iterate(req, q.get):
                    pass
                outs.append(self._output(req))
        except BaseException:
            self._abort_all(reqs)
            raise
        return outs

    def _abort_all(self, reqs: list[Request]) -> None:
        """Abort ``reqs`` whose call failed or was cancelled: those still running, and those
        already answered but paused with their KV kept (``keep_kv``, a hook's pause), whose
        ids never reach the caller."""
        for req in reqs:
            self.abort(req.request_id)

    async def _aoutput(self, req: Request, q: asyncio.Queue) -> RequestOutput:
        async for _ in self._adeltas(req, q):
            pass
        return self._output(req)

    def _output(self, req: Request) -> RequestOutput:
        """The finished segment of ``req``, read under the lock (no step, resume or abort
        changes it meanwhile)."""
        with self._lock:
            return RequestOutput.of(req)

    async def _adeltas(self, req: Request, q: asyncio.Queue) -> AsyncIterator[StreamDelta]:
        finished = False
        try:
            while not finished:
                delta = self._delta(req, await q.get())
                finished = delta.finished
                yield delta
        finally:
            if not finished:
                self.abort(req.request_id)

    def _stream_queue(self, req: Request, q: queue.Queue) -> Iterator[StreamDelta]:
        finished = False
        try:
            for delta in self._iterate(req, q.get):
                finished = delta.finished
                yield delta
        finally:
            if not finished:
                self.abort(req.request_id)

    def _iterate(self, req: Request, get: Callable[[], Any]) -> Iterator[StreamDelta]:
        while True:
            delta = self._delta(req, get())
            yield delta
            if delta.finished:
                return

    @staticmethod
    def _delta(req: Request, item: StepUpdate | BaseException) -> StreamDelta:
        """The delta of ``item``; a ``RuntimeError`` where the request failed (its logits
        processor or sampling raised: the engine serves on) or the whole step did."""
        if isinstance(item, BaseException):
            raise RuntimeError(f"the engine failed while running {req.request_id}: "
                               f"{type(item).__name__}: {item}") from item
        if item.error is not None:
            raise RuntimeError(f"request {req.request_id} failed in its sampling (its logits "
                               f"processor or sampler raised; other requests go on): "
                               f"{type(item.error).__name__}: {item.error}") from item.error
        return item.delta


def _async_queue() -> tuple[asyncio.Queue, Callable[[Any], None]]:
    """An asyncio queue and a thread-safe callback that puts into it."""
    loop = asyncio.get_running_loop()
    q: asyncio.Queue = asyncio.Queue()
    return q, lambda item: loop.call_soon_threadsafe(q.put_nowait, item)


def _prompt_batch(prompts: object) -> tuple[list[Prompt], bool]:
    """The prompts of a ``generate`` call, and whether it was given one prompt."""
    if is_prompt(prompts):
        return [prompts], True  # type: ignore[list-item]
    if isinstance(prompts, list | tuple) and all(is_prompt(p) for p in prompts):
        return list(prompts), False
    raise TypeError(f"prompts must be a prompt (a string or a list of token ids) or a list of "
                    f"prompts, got {type(prompts).__name__}")
