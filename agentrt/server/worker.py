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
"""

from __future__ import annotations

import asyncio
import json
import time
from functools import cache
from pathlib import Path
from typing import Any

import anyio
from fastapi import APIRouter
from starlette.responses import PlainTextResponse, Response

from agentrt import __version__
from agentrt.backends.sglang_protocol import SGLANG_API_VERSION
from agentrt.core.sampling_params import SamplingParams
from agentrt.server.state import ServerState, State

__all__ = ["router"]

_HEALTH_TIMEOUT = 20.0
router = APIRouter()


@router.get("/server_info")
@router.get("/get_server_info")
async def server_info(state: State) -> dict[str, Any]:
    """The server's configuration and state (SGLang's keys where they mean the same)."""
    core, config = state.engine.core, state.engine.config
    load = await _load(state)
    stats = state.engine.stats
    return {
        "model_path": str(core.model_path), "tokenizer_path": str(core.model_path),
        "served_model_name": state.model_name, "dp_size": 1, "tp_size": 1,
        "context_length": core.max_model_len, "max_req_input_len": core.max_model_len - 1,
        "max_total_num_tokens": load[0]["max_total_num_tokens"],
        "max_running_requests": config.max_num_seqs, "page_size": config.block_size,
        "disaggregation_mode": "null", "version": __version__, "engine": "agentrt",
        "sglang_api_version": SGLANG_API_VERSION,
        "session_kv_held": True,
        "internal_states": load,
        "num_cached_tokens": stats.num_cached_tokens,
        "num_prefill_tokens": stats.num_prefill_tokens,
    }


@router.get("/model_info")
@router.get("/get_model_info")
async def model_info(state: State) -> dict[str, Any]:
    """What the served model is."""
    path = state.engine.core.model_path
    return {
        "model_path": str(path), "tokenizer_path": str(path), "is_generation": True,
        "preferred_sampling_params": None, "weight_version": "default",
        "has_image_understanding": False, "has_audio_understanding": False,
        "model_type": _model_type(Path(path)),
        "architectures": [state.engine.core.model_config.architecture],
    }


@router.get("/get_load")
async def get_load(state: State) -> list[dict[str, Any]]:
    """One entry (one data-parallel rank): requests and KV tokens in use."""
    return await _load(state)


@router.api_route("/flush_cache", methods=["GET", "POST"])
async def flush_cache(state: State) -> Response:
    """Drop every prefix-cache entry no request is using."""
    num_blocks = await anyio.to_thread.run_sync(state.engine.clear_prefix_cache)
    return PlainTextResponse(f"Cache flushed.\n{num_blocks} KV blocks released.\n")


@router.get("/health_generate")
async def health_generate(state: State) -> Response:
    """200 if the engine generates: a busy engine is healthy; an idle one makes a token."""
    load = await _load(state)
    if load[0]["num_reqs"]:
        return Response(status_code=200)
    params = SamplingParams(max_tokens=1)
    try:
        await asyncio.wait_for(state.engine.agenerate([0], params), _HEALTH_TIMEOUT)
    except (TimeoutError, RuntimeError):
        return Response(status_code=503)
    return Response(status_code=200)


async def _load(state: ServerState) -> list[dict[str, Any]]:
    """SGLang's ``GetLoadReqOutput`` for the one rank (waits for the step in flight)."""
    snap = await anyio.to_thread.run_sync(state.engine.load)
    block_size = state.engine.config.block_size
    held = snap.num_total_blocks - snap.num_free_blocks - snap.num_evictable_blocks
    return [{"dp_rank": 0, "num_reqs": snap.num_running + snap.num_waiting,
             "num_waiting_reqs": snap.num_waiting, "num_tokens": held * block_size,
             "max_total_num_tokens": snap.num_total_blocks * block_size,
             "ts_tic": time.time()}]


@cache
def _model_type(path: Path) -> str | None:
    try:
        return json.loads((path / "config.json").read_text()).get("model_type")
    except (OSError, ValueError):
        return None
