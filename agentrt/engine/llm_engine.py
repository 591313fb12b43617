"""LLMEngine: the synchronous core — add requests, step, abort, resume. No threads.

One ``step`` is: schedule → run the model on the scheduled chunks → sample for chunks that
reached the end of their request → append, detokenize, check stops, call hooks → finish,
pause or keep running. :class:`agentrt.Engine` wraps this core with a driver thread and the
sync/async generate and stream calls.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from agentrt.attention import get_backend
from agentrt.config import EngineConfig
from agentrt.core.detokenizer import IncrementalDetokenizer, find_stop, stop_holdback
from agentrt.core.kv_tensors import KVCacheTensors
from agentrt.core.request import Request, RequestStatus
from agentrt.core.sampling_params import SamplingParams
from agentrt.engine.model_runner import ModelRunner
from agentrt.engine.sampler import sample
from agentrt.kvcache.manager import KVCacheManager
from agentrt.models import load_model
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


@dataclass(frozen=True)
class StepUpdate:
    """What one step did to one request."""

    request: Request
    new_token_ids: list[int]
    text_delta: str
    finished: bool


class LLMEngine:
    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self._init_threads()
        self._init_model()
        self._init_kv()
        self.runner = ModelRunner(self.model, self.backend, config.block_size)
        self.scheduler = Scheduler(self.kv, config.max_num_seqs, config.max_num_batched_tokens)
        self.requests: dict[str, Request] = {}
        self.stats = EngineStats()

    # --- construction ----------------------------------------------------------------------
    def _init_threads(self) -> None:
        if self.config.num_threads:
            torch.set_num_threads(self.config.num_threads)

    def _init_model(self) -> None:
        dtype = _DTYPES["float32" if self.config.dtype == "auto" else self.config.dtype]
        loaded = load_model(self.config.model, dtype)
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
        self.kv_tensors = KVCacheTensors.allocate(*shape, dtype=self.dtype)
        host = None
        if c.host_kv_cache_gb > 0:
            host_blocks = max(1, int(c.host_kv_cache_gb * 2**30 // page_bytes))
            host = KVCacheTensors.allocate(mc.num_layers, host_blocks, *shape[2:], self.dtype)
        self.kv = KVCacheManager(self.kv_tensors, host, c.enable_prefix_cache)
        self.backend = get_backend(c.attention_backend)(self.kv_tensors, mc.num_heads, mc.head_dim)
        limit = min(mc.max_position_embeddings, num_blocks * c.block_size)
        self.max_model_len = min(limit, c.max_model_len or limit)

    # --- requests --------------------------------------------------------------------------
    def encode(self, prompt: str | list[int]) -> list[int]:
        """Token ids of ``prompt`` (text is tokenized without adding special tokens)."""
        if isinstance(prompt, str):
            return self.tokenizer.encode(prompt, add_special_tokens=False)
        return [int(t) for t in prompt]

    def add_request(self, prompt: str | list[int], params: SamplingParams | None = None, *,
                    request_id: str | None = None, namespace: str = "", hook=None,
                    keep_kv: bool = False, forced_token_ids: Sequence[int] = ()) -> Request:
        """Validate and queue a request; raises ``ValueError`` on bad input.

        ``forced_token_ids`` replace the sampled token at each step, in order (the forward
        pass still runs per token); sampling resumes when they run out.
        """
        params = params or SamplingParams()
        ids = self.encode(prompt)
        self._check_prompt(ids)
        rid = request_id or f"req-{next(_counter)}"
        if rid in self.requests:
            raise ValueError(f"request id {rid!r} is already in use")
        req = Request(rid, ids, params, namespace=namespace, hook=hook, keep_kv=keep_kv,
                      forced_token_ids=deque(self.encode(list(forced_token_ids))))
        self._start_segment(req)
        self.requests[rid] = req
        self.scheduler.add(req)
        return req

    def resume(self, request_id: str, appended: str | list[int],
               params: SamplingParams | None = None, *, keep_kv: bool | None = None) -> Request:
        """Continue a paused request: append tokens and generate again, reusing its KV."""
        req = self._get(request_id)
        if req.status is not RequestStatus.PAUSED:
            raise ValueError(f"request {request_id!r} is {req.status.value}, not paused")
        ids = self.encode(appended)
        if req.num_tokens + len(ids) >= self.max_model_len:
            raise ValueError(f"resuming {request_id!r} would exceed the context "
                             f"({req.num_tokens + len(ids)} >= {self.max_model_len} tokens)")
        req.token_ids.extend(ids)
        req.params = params or req.params
        req.keep_kv = req.keep_kv if keep_kv is None else keep_kv
        self._start_segment(req)
        self.scheduler.add(req)
        return req

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
        if req.status is RequestStatus.PAUSED:
            self._release(req, req.finish_reason)

    def has_unfinished(self) -> bool:
        return self.scheduler.has_work()

    # --- the loop --------------------------------------------------------------------------
    def step(self) -> list[StepUpdate]:
        """Run one scheduling step; return what happened to each request it touched."""
        out = self.scheduler.schedule()
        self.stats.num_preemptions += len(out.preempted)
        self.stats.num_cached_tokens += out.num_cached_tokens
        if out.is_empty:
            return []
        logits = self.runner.run(out)
        sampled_reqs = []
        for chunk in out.chunks:
            req = chunk.request
            self._count_computed(req, chunk.num_tokens)
            if chunk.samples:
                sampled_reqs.append(req)
            req.num_computed_tokens += chunk.num_tokens
        tokens = sample(logits, sampled_reqs) if sampled_reqs else []
        self.stats.num_steps += 1
        return [self._append(req, tok) for req, tok in zip(sampled_reqs, tokens, strict=True)]

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
        return StepUpdate(req, [token], self._stream_delta(req), reason is not None)

    @staticmethod
    def _call_hook(req: Request, token: int):
        """The request's hook; one that raises aborts only its own request."""
        if req.hook is None:
            return None
        try:
            return req.hook(req, [token])
        except Exception as exc:  # noqa: BLE001 - a broken hook must not stop the batch
            req.stop_reason = f"hook raised {type(exc).__name__}: {exc}"
            return "abort"

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
        if not req.status.is_finished and req.status is not RequestStatus.PAUSED:
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
        req.num_segment_outputs = 0
        req.last_is_sampled = False
        req.finish_reason = req.stop_reason = None
        req.output_text, req.num_emitted_chars, req.logprobs = "", 0, []
        req.detok = IncrementalDetokenizer(
            self.tokenizer, req.token_ids, skip_special_tokens=req.params.skip_special_tokens)

    def _count_computed(self, req: Request, n: int) -> None:
        if n == 1 and req.last_is_sampled and req.num_pending_tokens == 1:
            req.stats.num_decode_tokens += 1
            self.stats.num_decode_tokens += 1
        else:
            req.stats.num_prefill_tokens += n
            self.stats.num_prefill_tokens += n

    def _finish(self, req: Request, reason) -> None:
        req.finish_reason = reason
        if req.keep_kv and reason != "abort":
            req.status = RequestStatus.PAUSED
            return
        self._release(req, reason)

    def _release(self, req: Request, reason) -> None:
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
