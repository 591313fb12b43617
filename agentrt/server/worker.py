"""What sglang-router asks of a worker, so ``agentrt serve`` processes scale out behind it.

Measured against sglang-router 0.3.2 (the PyPI release) on loopback: registering a worker it
calls ``GET /health`` (200 = healthy; polled again every ``--health-check-interval-secs``),
then ``GET /server_info`` and ``GET /model_info`` (``served_model_name`` or ``model_path``
becomes the worker's model id; a ``dp_size`` above 1 would make it DP-aware). It forwards
``/generate`` (see :mod:`.native`) and the OpenAI routes as they are, fans ``/flush_cache``
out to every worker and its ``/get_loads`` out to ``GET /get_load`` (a list with one entry
per data-parallel rank whose ``num_tokens`` it sums). Cache-aware routing itself needs
nothing from a worker: the router keeps its own approximate tree of what it sent where.

The SGLang 0.5.8 names (``/server_info``, ``/model_info``) and the deprecated ones
(``/get_server_info``, ``/get_model_info``) both answer; ``/health_generate`` generates one
token when the engine is idle, as SGLang's does.

A server fronting a remote backend (``agentrt serve --backend sglang``) has no engine of its
own: ``/server_info`` then says which backend it fronts and that backend's capabilities
(no pause in place; whether sessions keep KV), ``/get_load`` and ``/flush_cache`` are
forwarded to the backend server.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from functools import cache
from pathlib import Path
from typing import Any

import anyio
import httpx
from fastapi import APIRouter
from starlette.responses import PlainTextResponse, Response

from agentrt import __version__
from agentrt.backends.sglang_protocol import SGLANG_API_VERSION
from agentrt.core.sampling_params import SamplingParams
from agentrt.server.errors import APIError
from agentrt.server.state import ServerState, State

__all__ = ["router"]

_HEALTH_TIMEOUT = 20.0
router = APIRouter()


@router.get("/server_info")
@router.get("/get_server_info")
async def server_info(state: State) -> dict[str, Any]:
    """The server's configuration and state (SGLang's keys where they mean the same)."""
    info, backend = state.backend.model_info, state.backend
    answer: dict[str, Any] = {
        "model_path": info.path, "tokenizer_path": info.path,
        "served_model_name": state.model_name, "dp_size": 1, "tp_size": 1,
        "context_length": info.max_model_len, "max_req_input_len": info.max_model_len - 1,
        "disaggregation_mode": "null", "version": __version__, "engine": "agentrt",
        "sglang_api_version": SGLANG_API_VERSION, "backend": backend.name,
        "capabilities": dataclasses.asdict(backend.capabilities),
        "session_kv_held": backend.capabilities.kv_held_between_calls,
    }
    if state.engine is None:
        return {**answer, "backend_url": state.backend_url}
    config, stats = state.engine.config, state.engine.stats
    load = await _load(state)
    return {
        **answer, "max_total_num_tokens": load[0]["max_total_num_tokens"],
        "max_running_requests": config.max_num_seqs, "page_size": config.block_size,
        "internal_states": load,
        "num_cached_tokens": stats.num_cached_tokens,
        "num_prefill_tokens": stats.num_prefill_tokens,
    }


@router.get("/model_info")
@router.get("/get_model_info")
async def model_info(state: State) -> dict[str, Any]:
    """What the served model is."""
    info = state.backend.model_info
    return {
        "model_path": info.path, "tokenizer_path": info.path, "is_generation": True,
        "preferred_sampling_params": None, "weight_version": "default",
        "has_image_understanding": False, "has_audio_understanding": False,
        "model_type": _model_type(Path(info.path)),
        "architectures": [info.architecture],
    }


@router.get("/get_load")
async def get_load(state: State) -> Any:
    """One entry (one data-parallel rank): requests and KV tokens in use."""
    if state.engine is None:
        return (await _forward(state, "GET", "/get_load")).json()
    return await _load(state)


@router.api_route("/flush_cache", methods=["GET", "POST"])
async def flush_cache(state: State) -> Response:
    """Drop every prefix-cache entry no request is using."""
    if state.engine is None:
        answer = await _forward(state, "POST", "/flush_cache")
        return PlainTextResponse(answer.text, status_code=answer.status_code)
    num_blocks = await anyio.to_thread.run_sync(state.engine.clear_prefix_cache)
    return PlainTextResponse(f"Cache flushed.\n{num_blocks} KV blocks released.\n")


@router.get("/health_generate")
async def health_generate(state: State) -> Response:
    """200 if the backend generates: a busy engine is healthy; an idle one (or a remote
    backend) makes a token."""
    if state.engine is not None and (await _load(state))[0]["num_reqs"]:
        return Response(status_code=200)
    params = SamplingParams(max_tokens=1)
    try:
        await asyncio.wait_for(state.backend.agenerate([0], params), _HEALTH_TIMEOUT)
    except (TimeoutError, RuntimeError, ValueError, httpx.HTTPError):
        return Response(status_code=503)
    return Response(status_code=200)


async def _load(state: ServerState) -> list[dict[str, Any]]:
    """SGLang's ``GetLoadReqOutput`` for the one rank (waits for the step in flight)."""
    engine = state.local_engine("/get_load")
    snap = await anyio.to_thread.run_sync(engine.load)
    block_size = engine.config.block_size
    held = snap.num_total_blocks - snap.num_free_blocks - snap.num_evictable_blocks
    return [{"dp_rank": 0, "num_reqs": snap.num_running + snap.num_waiting,
             "num_waiting_reqs": snap.num_waiting, "num_tokens": held * block_size,
             "max_total_num_tokens": snap.num_total_blocks * block_size,
             "ts_tic": time.time()}]


async def _forward(state: ServerState, method: str, path: str) -> httpx.Response:
    """``path`` asked of the remote backend server (a 501 without one, 502 if it fails)."""
    if state.backend_url is None:
        state.local_engine(path)  # raises the 501
    try:
        async with httpx.AsyncClient(base_url=state.backend_url or "", timeout=30,
                                     headers=state.backend_headers) as client:
            answer = await client.request(method, path)
    except httpx.HTTPError as exc:
        raise APIError(502, f"the backend server did not answer {path}: {exc}",
                       type="server_error") from exc
    if answer.status_code >= 400:
        raise APIError(502, f"the backend server answered {path} with "
                            f"{answer.status_code}: {answer.text[:200]}", type="server_error")
    return answer


@cache
def _model_type(path: Path) -> str | None:
    try:
        return json.loads((path / "config.json").read_text()).get("model_type")
    except (OSError, ValueError):
        return None
