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
import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from agentrt.attention import get_attention_backend
from agentrt.config import EngineConfig
from agentrt.core.detokenizer import IncrementalDetokenizer, find_stop, stop_holdback
from agentrt.core.kv_tensors import KVCacheTensors
from agentrt.core.model_info import ModelInfo
from agentrt.core.options import RequestOptions
from agentrt.core.outputs import StreamDelta, segment_counters
from agentrt.core.request import Pause, Request, RequestStatus
from agentrt.core.sampling_params import SamplingParams
from agentrt.engine.cuda_graph import DecodeGraphs
from agentrt.engine.grammar import with_grammar_processor
from agentrt.engine.model_runner import ModelRunner
from agentrt.engine.sampler import Sampled, sample
from agentrt.intercept import CostModel, ForwardTimeFit, Strategy
from agentrt.kvcache.manager import KVCacheManager
from agentrt.models import load_model
from agentrt.scheduler.interceptions import InterceptionManager, InterceptionStats
from agentrt.scheduler.jobs import SegmentPredictor
from agentrt.scheduler.policies import get_policy
from agentrt.scheduler.scheduler import Scheduler

__all__ = ["EngineStats", "LLMEngine", "StepUpdate"]

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_counter = itertools.count()


@dataclass
class EngineStats:
    """Engine-wide counters since start."""

    num_steps: int = 0
    num_prefill_tokens: int = 0
    num_decode_tokens: int = 0
    num_cached_tokens: int = 0
    num_preemptions: int = 0
    num_finished: int = 0
    num_aborted: int = 0
    num_recomputed_tokens: int = 0
    """Tokens computed again after their KV was discarded or evicted during an interception."""
    forward_seconds: float = 0.0
    recompute_seconds: float = 0.0
    """The share of ``forward_seconds`` spent on recomputed tokens (pro rata per step)."""
    interceptions: InterceptionStats = field(default_factory=InterceptionStats)


@dataclass(frozen=True)
class StepUpdate:
    """What one step did to one request: the delta its caller sees, made inside the step."""

    request: Request
    delta: StreamDelta
    error: Exception | None = None
    """What failed inside this request's sampling (it is aborted; the others run on)."""

    @property
    def finished(self) -> bool:
        return self.delta.finished


class LLMEngine:
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
            self._profile()
        self._init_cuda_graphs()

    # --- construction ----------------------------------------------------------------------
    def _init_threads(self) -> None:
        if self.config.num_threads:
            torch.set_num_threads(self.config.num_threads)

    def _init_model(self) -> None:
        dtype = _DTYPES[self.config.resolved_dtype]
        loaded = load_model(self.config.model, dtype, self.config.resolved_quantization,
                            fused_ops=self.config.uses_fused_ops, device=self.device)
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
        self.kv = KVCacheManager(self.kv_tensors, host, c.enable_prefix_cache)
        backend = get_attention_backend(c.resolved_attention_backend)
        self.backend = backend(self.kv_tensors, mc.num_heads, mc.head_dim)
        limit = min(mc.max_position_embeddings, num_blocks * c.block_size)
        self.max_model_len = min(limit, c.max_model_len or limit)

    def _init_scheduling(self) -> None:
        c = self.config
        self.fwd_fit = ForwardTimeFit()
        self.cost = CostModel(self.kv_bytes_per_token, fwd_a=0.0, fwd_b=1e-3,
                              swap_seconds_per_token=self._measure_swap(),
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
        sizes = self.config.cuda_graph_batch_sizes
        backend = self.backend
        if self.device.type != "cuda" or not sizes or not backend.supports_decode_graphs:
            return
        pad_page = self.kv.pool.allocate(1)[0]  # NOTE: never freed; padded rows write here
        self.runner.graphs = DecodeGraphs(self.model, backend, sizes, pad_page,
                                          self.kv_tensors.num_pages, self.device)

    def _measure_swap(self) -> float:
        """Seconds per token to copy KV to the host pool (inf without one)."""
        if self.kv.host is None:
            return float("inf")
        n = min(4, self.kv.host.num_pages, self.kv_tensors.num_pages)
        t0 = time.perf_counter()
        self.kv.copier.swap_out(self.kv_tensors, self.kv.host, list(range(n)), list(range(n)))
        self.kv.copier.synchronize()
        return (time.perf_counter() - t0) / (n * self.config.block_size)

    def _profile(self) -> None:
        """Fit T_fwd(tokens) on this machine: a warm-up request, then prefill chunks of two
        sizes and a few decode steps. The engine keeps refining the fit from every step."""
        vocab, limit = self.model_config.vocab_size, self.max_model_len - 8
        sizes = [(min(32, limit), 2), (min(128, limit), 3), (min(48, limit), 1)]
        for k, (n, out) in enumerate(sizes):
            if k == 1:
                self.fwd_fit.samples.clear()  # drop the warm-up's one-time costs
            ids = [(i * 7919 + k * 104729) % vocab for i in range(max(n, 2))]
            self.add_request(ids, SamplingParams(max_tokens=out, ignore_eos=True),
                             request_id=f"agentrt-profile-{k}", namespace="agentrt/profile")
            while self.has_unfinished():
                self.step()
        self.clear_prefix_cache()
        self._refit_cost()
        self.interceptions.stats = InterceptionStats()
        self.stats = EngineStats(interceptions=self.interceptions.stats)

    def _refit_cost(self) -> None:
        a, b, c = self.fwd_fit.coefficients()
        self.cost = replace(self.cost, fwd_a=a, fwd_b=b, fwd_c=c)
        self.interceptions.cost = self.cost
        if hasattr(self.scheduler.policy, "cost"):
            self.scheduler.policy.cost = self.cost

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
        self._start_segment(req)
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
        self._truncate(req, kept, max_computed=kept + len(ids) - 1)
        self.interceptions.resume(req)
        req.token_ids.extend(ids)
        req.params = params or req.params
        req.keep_kv, req.pending_pause, req.hook = opts.keeps_kv, opts.pause, opts.hook
        req.group, req.depth = opts.group, opts.depth
        req.forced_token_ids = deque(self.encode(list(opts.forced_token_ids)))
        self._start_segment(req)
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
        self._record_step(out.num_tokens, time.perf_counter() - t0, recomputed)
        updates = [self._fail(req, sampled.errors[i]) if i in sampled.errors
                   else self._append(req, tok)
                   for i, (req, tok) in enumerate(zip(sampled_reqs, sampled.token_ids,
                                                      strict=True))]
        self.interceptions.end_step(self.scheduler.num_running_tokens, out.num_tokens,
                                    self._memory_pressure)
        return updates

    @property
    def _memory_pressure(self) -> bool:
        """Someone could use paused requests' memory: requests wait, or < 10% is free."""
        nearly_full = self.kv.num_free_blocks < self.kv.pool.num_blocks / 10
        return bool(self.scheduler.waiting) or nearly_full

    def _record_step(self, num_tokens: int, seconds: float, recomputed: int) -> None:
        """Step counters, the online T_fwd fit, and the waste of recomputing: everyone's KV
        idles while the step spends time on tokens it had computed once already."""
        self.stats.num_steps += 1
        self.stats.forward_seconds += seconds
        self._last_batch_tokens = num_tokens
        self.fwd_fit.add(num_tokens, seconds)
        if self.stats.num_steps % 64 == 0:
            self._refit_cost()
        if recomputed:
            stall = seconds * recomputed / num_tokens
            self.stats.recompute_seconds += stall
            held = self.scheduler.num_running_tokens
            self.interceptions.add_waste(None, stall * held * self.cost.kv_bytes_per_token)

    def _append(self, req: Request, token: int) -> StepUpdate:
        if req.forced_token_ids:
            token = req.forced_token_ids.popleft()
        if req.stats.first_token_time is None:
            req.stats.first_token_time = time.monotonic()
        req.token_ids.append(token)
        req.num_segment_outputs += 1
        req.last_is_sampled = True
        prev = len(req.output_text)
        req.output_text += req.detok.push([token])
        reason = self._finish_reason(req, token, prev)
        action = self._call_hook(req, token)
        if reason is None and action in ("pause", "abort"):
            reason = "stop" if action == "pause" else "abort"
            req.keep_kv = req.keep_kv or action == "pause"
        if reason is not None:
            self.scheduler.remove(req)
            self._finish(req, reason)
        return self.update(req, [token], self._stream_delta(req), reason is not None)

    def update(self, req: Request, token_ids: list[int], text: str, finished: bool,
               error: Exception | None = None) -> StepUpdate:
        """The update (and stream delta, with the segment's counters) of ``req`` now."""
        prompt, cached, _ = segment_counters(req)
        delta = StreamDelta(req.request_id, text, token_ids, finished,
                            req.finish_reason if finished else None, prompt, cached,
                            req.stop_reason if finished else None)
        return StepUpdate(req, delta, error)

    def _fail(self, req: Request, exc: Exception) -> StepUpdate:
        """Abort ``req`` alone: its logits processor or sampling raised ``exc``."""
        self.scheduler.remove(req)
        self._release(req, "abort")
        req.stop_reason = f"sampling failed: {type(exc).__name__}: {exc}"
        return self.update(req, [], "", True, error=exc)

    @staticmethod
    def _call_hook(req: Request, token: int):
        """The request's hook; one that raises aborts only its own request. A hook answering
        ``Pause(kind, expected_duration)`` pauses the request for a tool of that kind."""
        if req.hook is None:
            return None
        try:
            action = req.hook(req, [token])
        except Exception as exc:  # noqa: BLE001 - a broken hook must not stop the batch
            req.stop_reason = f"hook raised {type(exc).__name__}: {exc}"
            return "abort"
        if isinstance(action, Pause):
            req.pending_pause = action
            return "pause"
        return action

    def _finish_reason(self, req: Request, token: int, prev_len: int):
        p = req.params
        if (token in self.eos_token_ids and not p.ignore_eos) or token in p.stop_token_ids:
            req.stop_reason = token
            return "stop"
        if p.stop:
            hit = find_stop(req.output_text, p.stop, prev_len)
            if hit is not None:
                req.output_text = req.output_text[: hit[0]]
                req.stop_reason = hit[1]
                return "stop"
        if req.num_segment_outputs >= p.max_tokens or req.num_tokens >= self.max_model_len:
            return "length"
        return None

    def _stream_delta(self, req: Request) -> str:
        end = len(req.output_text)
        if not req.status.is_finished and req.status is not RequestStatus.INTERCEPTED:
            end -= stop_holdback(req.output_text, req.params.stop)
        delta = req.output_text[req.num_emitted_chars : max(end, req.num_emitted_chars)]
        req.num_emitted_chars += len(delta)
        return delta

    # --- helpers ---------------------------------------------------------------------------
    def _check_prompt(self, ids: list[int]) -> None:
        if not ids:
            raise ValueError("the prompt is empty")
        if len(ids) >= self.max_model_len:
            raise ValueError(f"the prompt has {len(ids)} tokens; the context holds "
                             f"{self.max_model_len} (prompt + at least one generated token)")
        vocab = self.model_config.vocab_size
        if min(ids) < 0 or max(ids) >= vocab:
            raise ValueError(f"token ids must be in [0, {vocab})")

    def _start_segment(self, req: Request) -> None:
        req.segment_start = req.num_tokens
        req.segment_prefill_start = req.stats.num_prefill_tokens
        req.num_segment_outputs = 0
        req.last_is_sampled = False
        req.finish_reason = req.stop_reason = None
        req.output_text, req.num_emitted_chars, req.logprobs = "", 0, []
        req.detok = IncrementalDetokenizer(
            self.tokenizer, req.token_ids, skip_special_tokens=req.params.skip_special_tokens)

    def _truncate(self, req: Request, n: int, max_computed: int) -> None:
        """Keep the first ``n`` tokens and at most ``max_computed`` tokens of KV. A page
        shared with the prefix cache is never written again, so the kept KV stops at a page
        boundary when the page holding the first token to compute is shared."""
        bs = self.config.block_size
        keep = min(req.num_computed_tokens, n, max_computed)
        if keep == req.num_computed_tokens and n == req.num_tokens:
            return  # the plain resume: nothing to roll back
        page = keep // bs
        if keep % bs and page < len(req.block_table) and \
                self.kv.pool.ref_count(req.block_table[page]) > 1:
            keep = page * bs
        num_pages = -(-keep // bs)
        if len(req.block_table) > num_pages:
            self.kv.pool.decref(req.block_table[num_pages:])
            del req.block_table[num_pages:]
        del req.token_ids[n:]
        req.num_computed_tokens = keep
        req.recompute_until = min(req.recompute_until, n)
        req.last_is_sampled = False

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
