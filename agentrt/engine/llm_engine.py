"""LLMEngine: the synchronous core — add requests, step, abort, resume. No threads.

One ``step`` is: schedule → run the model on the scheduled chunks → sample for chunks that
reached the end of their request → append, detokenize, check stops, call hooks → finish,
pause or keep running. :class:`agentrt.Engine` wraps this core with a driver thread and the
sync/async generate and stream calls.

Everything the engine owns in tensors lives on ``config.resolved_device``: weights, the KV
pool, each step's inputs and attention plan, logits and sampling state; only the host KV pool
(pinned on CUDA) is on the CPU. On CUDA, decode steps replay CUDA graphs captured after the
warm-up unless ``enforce_eager``.
"""

from __future__ import annotations

import itertools
import numbers
import time
from collections import deque
from typing import Any

import torch

from agentrt.attention import attention_backend_for
from agentrt.config import EngineConfig
from agentrt.core.kv_tensors import KVCacheTensors
from agentrt.core.model_info import ModelInfo
from agentrt.core.options import RequestOptions
from agentrt.core.request import Request, RequestStatus
from agentrt.core.sampling_params import SamplingParams
from agentrt.engine.cpu_step import CpuDecodeSteps
from agentrt.engine.cuda_graph import DecodeGraphs
from agentrt.engine.grammar import with_grammar_processor
from agentrt.engine.model_runner import ModelRunner
from agentrt.engine.output_processor import OutputProcessor, StepUpdate, make_update
from agentrt.engine.outputs import EngineStats
from agentrt.engine.profiling import measure_swap, profile, record_step
from agentrt.engine.sampler import Sampled, sample
from agentrt.intercept import CostModel, ForwardTimeFit, Strategy
from agentrt.kvcache.manager import KVCacheManager
from agentrt.models import load_model
from agentrt.scheduler.interceptions import InterceptionManager
from agentrt.scheduler.jobs import SegmentPredictor
from agentrt.scheduler.policies import get_policy
from agentrt.scheduler.scheduler import Scheduler

__all__ = ["EngineStats", "LLMEngine", "StepUpdate", "is_prompt"]

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_counter = itertools.count()


def is_prompt(value: object) -> bool:
    """Text, or token ids (a list or tuple of integers; empty is a prompt, refused later)."""
    return isinstance(value, str) or isinstance(value, list | tuple) and all(
        isinstance(t, numbers.Integral) and not isinstance(t, bool) for t in value)


class LLMEngine:
    """The engine core: owns the model, the KV pool and the scheduler; one caller at a time
    (:class:`agentrt.Engine` serializes callers and steps it from its driver thread)."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.device = torch.device(config.resolved_device)
        self._init_threads()
        self._init_model()
        self._init_kv()
        self.runner = ModelRunner(self.model, self.backend, config.block_size, self.device)
        self.requests: dict[str, Request] = {}
        self._last_batch_tokens = 1
        self.last_step_idle = False
        """The last step scheduled nothing although requests wait (they cannot fit yet)."""
        self._init_scheduling()
        if config.profile_on_start:
            profile(self)
        self._init_cuda_graphs()
        if not config.enforce_eager:  # None off the CPU or for models it cannot run
            self.runner.cpu_steps = CpuDecodeSteps.build(
                self.model, self.backend,
                adaptive_threads=config.cpu_decode_threads == "adaptive")

    # --- construction ----------------------------------------------------------------------
    def _init_threads(self) -> None:
        if self.config.num_threads:
            torch.set_num_threads(self.config.num_threads)

    def _init_model(self) -> None:
        dtype = _DTYPES[self.config.resolved_dtype]
        loaded = load_model(self.config.model, dtype, self.config.resolved_quantization,
                            fused_ops=self.config.uses_fused_ops, device=self.device,
                            gguf_activations=self.config.gguf_activations)
        self.model_path, self.model_config = loaded.path, loaded.config
        self.model, self.tokenizer, self.dtype = loaded.model, loaded.tokenizer, dtype
        self.eos_token_ids = set(loaded.config.eos_token_ids)
        if self.tokenizer.eos_token_id is not None:
            self.eos_token_ids.add(self.tokenizer.eos_token_id)

    def _init_kv(self) -> None:
        c, mc = self.config, self.model_config
        page_bytes = 2 * mc.num_layers * c.block_size * mc.num_kv_heads * mc.head_dim
        page_bytes *= self.dtype.itemsize
        num_blocks = c.num_blocks or max(1, int(c.kv_cache_gb * 2**30 // page_bytes))
        shape = (mc.num_layers, num_blocks, c.block_size, mc.num_kv_heads, mc.head_dim)
        self.kv_tensors = KVCacheTensors.allocate(*shape, dtype=self.dtype, device=self.device)
        host = None
        if c.host_kv_cache_gb > 0:
            host_blocks = max(1, int(c.host_kv_cache_gb * 2**30 // page_bytes))
            if self.device.type == "cpu":
                host = KVCacheTensors.allocate(mc.num_layers, host_blocks, *shape[2:], self.dtype)
            else:  # pinned and page-major: swaps are async copies on a side stream
                host = KVCacheTensors.allocate_host(mc.num_layers, host_blocks, *shape[2:],
                                                    self.dtype, pin_memory=True)
        windows = set(mc.layer_windows)  # pages are released only when every layer slides
        window = windows.pop() if len(windows) == 1 else None
        self.kv = KVCacheManager(self.kv_tensors, host, c.enable_prefix_cache, window=window)
        backend = attention_backend_for(c)  # NOTE: probes FlashInfer; warns on a fallback
        self.backend = backend(self.kv_tensors, mc.num_heads, mc.head_dim,
                               windows=mc.layer_windows, scale=mc.attn_scale)
        limit = min(mc.max_position_embeddings, num_blocks * c.block_size)
        self.max_model_len = min(limit, c.max_model_len or limit)
        self.model.fit_context(self.max_model_len)  # RoPE tables for this context (longrope)
        self.outputs = OutputProcessor(self.tokenizer, self.eos_token_ids, self.max_model_len)

    def _init_scheduling(self) -> None:
        c = self.config
        self.fwd_fit = ForwardTimeFit()
        self.cost = CostModel(self.kv_bytes_per_token, fwd_a=0.0, fwd_b=1e-3,
                              swap_seconds_per_token=measure_swap(self.kv),
                              saturation_tokens=c.max_num_batched_tokens)
        self.interceptions = InterceptionManager(self.kv, c.interception_handling, self.cost)
        self.predictor = SegmentPredictor(self.interceptions.estimator)
        options = {}
        if c.scheduling_policy == "lamps":
            options = dict(starvation_threshold=c.starvation_threshold,
                           refresh_interval=c.score_refresh_interval)
        policy = get_policy(c.scheduling_policy, self.cost, **options)
        self.scheduler = Scheduler(self.kv, c.max_num_seqs, c.max_num_batched_tokens, policy,
                                   self.predictor)
        self.scheduler.reclaim = self.interceptions.reclaim
        self.scheduler.swap_in = self.interceptions.swap_in
        self.stats = EngineStats(interceptions=self.interceptions.stats)

    def _init_cuda_graphs(self) -> None:
        """Capture decode steps as CUDA graphs (after the warm-up of ``_profile``), on CUDA
        with a backend whose kernels can be captured, unless ``enforce_eager``."""
        sizes, backend = self.config.cuda_graph_batch_sizes, self.backend
        if self.device.type != "cuda" or not sizes or not backend.supports_decode_graphs:
            return
        pad_page = self.kv.pool.allocate(1)[0]  # NOTE: never freed; padded rows write here
        max_pages_per_seq = -(-self.max_model_len // self.config.block_size)
        self.runner.graphs = DecodeGraphs(self.model, backend, sizes, pad_page,
                                          max_pages_per_seq, self.device)

    @property
    def kv_bytes_per_token(self) -> int:
        """M: bytes of K and V over all layers for one token."""
        mc = self.model_config
        return 2 * mc.num_layers * mc.num_kv_heads * mc.head_dim * self.dtype.itemsize

    # --- model ---------------------------------------------------------------------------
    @property
    def model_info(self) -> ModelInfo:
        """The loaded model: name, path, architecture, context and vocabulary limits."""
        return ModelInfo(name=self.config.model or "", path=str(self.model_path),
                         architecture=self.model_config.architecture,
                         max_model_len=self.max_model_len,
                         vocab_size=self.model_config.vocab_size,
                         eos_token_ids=tuple(sorted(self.eos_token_ids)))

    def encode(self, prompt: str | list[int]) -> list[int]:
        """Token ids of ``prompt`` (text is tokenized without adding special tokens)."""
        if isinstance(prompt, str):
            return self.tokenizer.encode(prompt, add_special_tokens=False)
        return [int(t) for t in prompt]

    def decode(self, token_ids: list[int], *, skip_special_tokens: bool = False) -> str:
        """The text of ``token_ids`` (special tokens kept unless ``skip_special_tokens``)."""
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=skip_special_tokens)

    # --- requests --------------------------------------------------------------------------
    def add_request(self, prompt: str | list[int], params: SamplingParams | None = None,
                    options: RequestOptions | None = None, **fields: Any) -> Request:
        """Validate and queue a request; raises ``ValueError`` on bad input.

        ``options`` (see :class:`~agentrt.core.options.RequestOptions`: id, namespace, hook,
        ``keep_kv``, forced tokens, planned pause, graph group and depth) may also be given
        as keyword ``fields``, applied on top of ``options``. A ``params.grammar`` is
        compiled into the request's logits processor here.
        """
        self._check_input(prompt, params)
        opts = RequestOptions.of(options, **fields)
        params = with_grammar_processor(params or SamplingParams(), self)
        ids = self.encode(prompt)
        self._check_prompt(ids)
        rid = opts.request_id or f"req-{next(_counter)}"
        if rid in self.requests:
            raise ValueError(f"request id {rid!r} is already in use")
        req = Request(rid, ids, params, namespace=opts.namespace, hook=opts.hook,
                      keep_kv=opts.keeps_kv, pending_pause=opts.pause,
                      forced_token_ids=deque(self.encode(list(opts.forced_token_ids))),
                      group=opts.group, depth=opts.depth)
        self.outputs.start_segment(req)
        self.requests[rid] = req
        self.scheduler.add(req)
        return req

    def resume(self, request_id: str, appended: str | list[int],
               params: SamplingParams | None = None, options: RequestOptions | None = None,
               *, truncate_to: int | None = None, **fields: Any) -> Request:
        """Continue a paused request: append tokens and generate again, reusing its KV.

        ``truncate_to`` first rolls the context back to its first n tokens (a seam whose
        re-tokenization differs: only the tokens after n are computed again). The new
        segment runs with ``options`` when given (its ``request_id`` must be this request's
        or None; the namespace is the request's own) — otherwise with the request's hook,
        ``keep_kv``, group and depth, no forced tokens and no planned pause — and keyword
        ``fields`` on top (e.g. ``hook=None`` drops the hook).
        """
        req = self._get(request_id)
        if req.status is not RequestStatus.INTERCEPTED:
            raise ValueError(f"request {request_id!r} is {req.status.value}, not paused")
        self._check_input(appended, params)
        opts = (options or self._options_of(req)).updated(fields)
        if opts.request_id not in (None, request_id):
            raise ValueError(f"options name request {opts.request_id!r}, not {request_id!r}")
        params = None if params is None else with_grammar_processor(params, self)
        ids = self.encode(appended)
        kept = req.num_tokens if truncate_to is None else truncate_to
        if not 0 < kept <= req.num_tokens:
            raise ValueError(f"truncate_to must be in [1, {req.num_tokens}], got {truncate_to}")
        if kept + len(ids) >= self.max_model_len:
            raise ValueError(f"resuming {request_id!r} would exceed the context "
                             f"({kept + len(ids)} >= {self.max_model_len} tokens)")
        # NOTE: at least one token is computed again, so that the next step samples
        if self.kv.truncate(req, kept, max_computed=kept + len(ids) - 1):
            req.last_is_sampled = False
        self.interceptions.resume(req)
        req.token_ids.extend(ids)
        req.params = params or req.params
        req.keep_kv, req.pending_pause, req.hook = opts.keeps_kv, opts.pause, opts.hook
        req.group, req.depth = opts.group, opts.depth
        req.forced_token_ids = deque(self.encode(list(opts.forced_token_ids)))
        self.outputs.start_segment(req)
        self.scheduler.add(req)
        return req

    @staticmethod
    def _options_of(req: Request) -> RequestOptions:
        """What a plain resume keeps of ``req``: hook, ``keep_kv``, group and depth."""
        return RequestOptions(request_id=req.request_id, namespace=req.namespace,
                              hook=req.hook, keep_kv=req.keep_kv, group=req.group,
                              depth=req.depth)

    def set_interception(self, request_id: str, kind: str,
                         expected_duration: float | None = None) -> None:
        """Say what a paused request waits for (a tool kind, and its expected seconds if
        known), so the handling policy can pick preserve, swap or discard for its KV."""
        req = self._get(request_id)
        if req.status is not RequestStatus.INTERCEPTED:
            raise ValueError(f"request {request_id!r} is {req.status.value}, not intercepted")
        self.interceptions.annotate(req, kind, expected_duration)

    def move_kv(self, request_id: str, strategy: str) -> None:
        """Force a paused request's KV to ``discard`` (prefix cache) or ``swap`` (host pool)
        now, whatever the handling policy would do; ``preserve`` leaves it where it is."""
        req = self._get(request_id)
        it = req.interception
        if req.status is not RequestStatus.INTERCEPTED or it is None:
            raise ValueError(f"request {request_id!r} is {req.status.value}, not intercepted")
        target = Strategy(strategy)
        if target is Strategy.PRESERVE or it.strategy != "preserve":
            return
        if target is Strategy.SWAP and not self.kv.can_swap_out(req):
            raise RuntimeError("no room in the host pool (set host_kv_cache_gb)")
        self.interceptions.move(req, target)

    def abort(self, request_id: str) -> Request | None:
        """Stop a request wherever it is and free everything it holds."""
        req = self.requests.get(request_id)
        if req is None or req.status.is_finished:
            return None
        self.scheduler.remove(req)
        self._release(req, "abort")
        return req

    def release(self, request_id: str) -> None:
        """Free a paused request's KV (it will not be resumed)."""
        req = self._get(request_id)
        if req.status is RequestStatus.INTERCEPTED:
            self._release(req, req.finish_reason)

    def has_unfinished(self) -> bool:
        """Whether a request is waiting or running, so ``step`` has work (a request paused
        for a tool is not counted until it is resumed); vLLM's ``has_unfinished_requests``."""
        return self.scheduler.has_work()

    # --- the loop --------------------------------------------------------------------------
    def step(self) -> list[StepUpdate]:
        """Run one scheduling step; return what happened to each request it touched.

        A request whose logits processor or sampling raises is aborted alone: its update is
        finished and carries the ``error``. Anything else that raises fails the whole step.
        """
        running_tokens = self.scheduler.num_running_tokens
        self.kv.reap()
        self.interceptions.begin_step(self._last_batch_tokens, running_tokens,
                                      self.scheduler.largest_swap_in)
        out = self.scheduler.schedule()
        self.stats.num_preemptions += len(out.preempted)
        self.stats.num_cached_tokens += out.num_cached_tokens
        self.last_step_idle = out.is_empty
        if out.is_empty:
            self.interceptions.end_step(running_tokens, 0, self._memory_pressure)
            return []
        t0 = time.perf_counter()
        logits = self.runner.run(out)
        sampled_reqs, recomputed = [], 0
        for chunk in out.chunks:
            req = chunk.request
            recomputed += self._count_computed(req, chunk.num_tokens)
            if chunk.samples:
                sampled_reqs.append(req)
            req.num_computed_tokens += chunk.num_tokens
        sampled = sample(logits, sampled_reqs) if sampled_reqs else Sampled([], {})
        self._last_batch_tokens = out.num_tokens
        record_step(self, out.num_tokens, time.perf_counter() - t0, recomputed)
        updates = []
        for i, (req, tok) in enumerate(zip(sampled_reqs, sampled.token_ids, strict=True)):
            if req.status is RequestStatus.FINISHED:
                continue  # NOTE: aborted by an earlier hook of this step (its update went out)
            updates.append(self._fail(req, sampled.errors[i]) if i in sampled.errors
                           else self._append(req, tok))
        self.interceptions.end_step(self.scheduler.num_running_tokens, out.num_tokens,
                                    self._memory_pressure)
        return updates

    @property
    def _memory_pressure(self) -> bool:
        """Someone could use paused requests' memory: requests wait, or < 10% is free."""
        nearly_full = self.kv.num_free_blocks < self.kv.pool.num_blocks / 10
        return bool(self.scheduler.waiting) or nearly_full

    def _append(self, req: Request, token: int) -> StepUpdate:
        reason = self.outputs.append(req, token)
        if req.status is RequestStatus.FINISHED:  # its own hook aborted it through the engine
            return make_update(req, [req.token_ids[-1]], "", True)
        if reason is not None:
            self.scheduler.remove(req)
            self._finish(req, reason)
        text = self.outputs.stream_text(req)  # NOTE: after _finish: a stop holds nothing back
        return make_update(req, [req.token_ids[-1]], text, reason is not None)

    def _fail(self, req: Request, exc: Exception) -> StepUpdate:
        """Abort ``req`` alone: its logits processor or sampling raised ``exc``."""
        self.scheduler.remove(req)
        self._release(req, "abort")
        req.stop_reason = f"sampling failed: {type(exc).__name__}: {exc}"
        return make_update(req, [], "", True, error=exc)

    # --- helpers ---------------------------------------------------------------------------
    def _check_input(self, prompt: object, params: object) -> None:
        """Raise for a prompt or params the engine cannot take, before anything is queued."""
        if not is_prompt(prompt):
            raise TypeError(f"a prompt is a string or a list of token ids, got "
                            f"{type(prompt).__name__}")
        if params is None:
            return
        if not isinstance(params, SamplingParams):
            hint = " (SamplingParams(**params) builds one)" if isinstance(params, dict) else \
                " (one for the whole batch: per-prompt params are one call each, e.g. " \
                "asyncio.gather of agenerate calls)" if isinstance(params, list | tuple) else ""
            raise TypeError(f"params must be a SamplingParams, got {type(params).__name__}{hint}")
        vocab = self.model_config.vocab_size
        if params.logprobs is not None and params.logprobs > vocab:
            raise ValueError(f"logprobs={params.logprobs} asks for more alternatives than the "
                             f"vocabulary has ({vocab})")

    def _check_prompt(self, ids: list[int]) -> None:
        if not ids:
            raise ValueError("the prompt is empty")
        if len(ids) >= self.max_model_len:
            raise ValueError(f"the prompt has {len(ids)} tokens; the context holds "
                             f"{self.max_model_len} (prompt + at least one generated token)")
        vocab = self.model_config.vocab_size
        if min(ids) < 0 or max(ids) >= vocab:
            raise ValueError(f"token ids must be in [0, {vocab})")

    def _count_computed(self, req: Request, n: int) -> int:
        """Book ``n`` tokens computed for ``req``; returns how many of them are recomputed."""
        if n == 1 and req.last_is_sampled and req.num_pending_tokens == 1:
            req.stats.num_decode_tokens += 1
            self.stats.num_decode_tokens += 1
        else:
            req.stats.num_prefill_tokens += n
            self.stats.num_prefill_tokens += n
        redo = max(0, min(n, req.recompute_until - req.num_computed_tokens))
        req.stats.num_recomputed_tokens += redo
        self.stats.num_recomputed_tokens += redo
        self.interceptions.stats.num_recomputed_tokens += redo
        return redo

    def _finish(self, req: Request, reason) -> None:
        req.finish_reason = reason
        self.predictor.observe_segment(req.num_segment_outputs)
        if req.keep_kv and reason != "abort":
            self.interceptions.intercept(req)
            return
        self._release(req, reason)

    def _release(self, req: Request, reason) -> None:
        self.interceptions.forget(req)
        self.scheduler.policy.forget(req.request_id)
        self.kv.free(req, cache=True)
        self.kv.discard_swapped(req)
        req.status = RequestStatus.FINISHED
        req.finish_reason = reason
        self.stats.num_finished += 1
        self.stats.num_aborted += reason == "abort"  # by abort() or by the request's hook
        self.requests.pop(req.request_id, None)

    def _get(self, request_id: str) -> Request:
        try:
            return self.requests[request_id]
        except KeyError:
            raise KeyError(f"unknown or finished request {request_id!r}") from None

    def clear_prefix_cache(self) -> int:
        """Evict every unlocked prefix-cache entry; returns blocks released."""
        return self.kv.cache.clear()
