"""SGLang's native HTTP API, as the ``sglang`` backend speaks it: bodies out, chunks in.

Follows SGLang 0.5.8 (``python/sglang/srt/entrypoints/http_server.py`` and
``managers/io_struct.py`` of that release); no ``sglang`` import. Pure functions, no I/O:

- ``POST /generate``: ``input_ids`` + ``sampling_params`` (SGLang's names, mapped from
  :class:`~agentrt.SamplingParams` by :func:`sampling_params`), ``rid``, ``stream`` and, for a
  session, ``session_params = {"id": session, "rid": the request to continue}``. The answer
  is ``{"text", "output_ids", "meta_info": {"id", "finish_reason", "prompt_tokens",
  "completion_tokens", "cached_tokens", ...}}``; ``finish_reason`` is None until the end,
  then ``{"type": "stop" | "length" | "abort", "matched" | "length" | "message": ...}``.
- Streamed, each ``data: {...}`` event carries the *cumulative* ``text``; ``output_ids``
  are cumulative too, or only the new ones when the server runs with ``--stream-output``
  (:class:`ChunkParser` handles both, from ``meta_info.completion_tokens``); ``data: [DONE]``
  ends the stream, ``data: {"error": {"message"}}`` reports a failure midway.
"""

from __future__ import annotations

import json
from typing import Any

from agentrt.core.outputs import StreamDelta
from agentrt.core.sampling_params import SamplingParams

__all__ = ["SGLANG_API_VERSION", "ChunkParser", "SGLangConnectionError", "SGLangError",
           "error_message", "generate_body", "is_router_info", "parse_payload", "sampling_params"]

SGLANG_API_VERSION = "0.5.8"
"""The SGLang release whose native API this client follows."""


class SGLangError(RuntimeError):
    """The server answered with an error (``status_code`` 0: reported inside a stream)."""

    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(f"SGLang server error {status_code}: {message}" if status_code
                         else f"SGLang server error: {message}")
        self.status_code = status_code
        self.message = message


class SGLangConnectionError(SGLangError, ConnectionError):
    """The server could not be reached or stopped answering: refused, reset, timed out, or a
    stream that ended before its request finished (``status_code`` 0; the message names the
    server's URL). A :class:`ConnectionError` as well as an :class:`SGLangError`."""

    def __init__(self, message: str) -> None:
        RuntimeError.__init__(self, message)
        self.status_code = 0
        self.message = message


def sampling_params(params: SamplingParams) -> dict[str, Any]:
    """``params`` in SGLang's names — a ``grammar`` as SGLang's ``ebnf`` / ``structural_tag``
    / ``json_schema`` / ``regex`` field; ``params.extra["sglang"]`` adds SGLang-only options
    (``min_p``, ``no_stop_trim``, ...)."""
    if params.logits_processor is not None:
        raise ValueError("a LogitsProcessor runs in process; the sglang backend cannot send "
                         "it (set SamplingParams.grammar instead)")
    if params.logprobs is not None:
        raise ValueError("logprobs are not supported by the sglang backend")
    out: dict[str, Any] = {
        "max_new_tokens": params.max_tokens, "temperature": params.temperature,
        "top_p": params.top_p, "top_k": params.top_k or -1,
        "ignore_eos": params.ignore_eos, "skip_special_tokens": params.skip_special_tokens,
    }
    if params.stop:
        out["stop"] = list(params.stop)
    if params.stop_token_ids:
        out["stop_token_ids"] = list(params.stop_token_ids)
    if params.seed is not None:
        out["sampling_seed"] = params.seed
    if params.grammar is not None:
        out[params.grammar.kind] = params.grammar.spec
    out.update(params.extra.get("sglang", {}))
    return out


def generate_body(prompt_ids: list[int], params: SamplingParams, *, rid: str, stream: bool,
                  session_params: dict[str, Any] | None = None, namespace: str = ""
                  ) -> dict[str, Any]:
    """The JSON body of one ``POST /generate``; a ``namespace`` travels as SGLang's
    ``extra_key`` (requests share cached prefixes only with the same key)."""
    body: dict[str, Any] = {"input_ids": prompt_ids, "sampling_params": sampling_params(params),
                            "rid": rid, "stream": stream}
    if session_params is not None:
        body["session_params"] = session_params
    if namespace:
        body["extra_key"] = namespace
    return body


def parse_payload(data: str) -> dict[str, Any]:
    """One event's JSON; a ``{"error": ...}`` payload raises :class:`SGLangError`."""
    out = json.loads(data)
    if isinstance(out, dict) and "error" in out:
        raise SGLangError(0, error_message(out))
    return out


def error_message(body: Any) -> str:
    """The message of SGLang's (or OpenAI's) error body, else the body itself."""
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return str(body["error"].get("message", body["error"]))
    if isinstance(body, dict) and isinstance(body.get("error"), str):  # SGLang's 401
        return body["error"]
    if isinstance(body, dict) and "message" in body:
        return str(body["message"])
    return str(body)


def is_router_info(info: Any) -> bool:
    """Whether a ``/server_info`` (``/get_server_info``) answer is not a server's: none
    (sglang-router 0.3.2 has no ``/server_info``) or the router's own summary."""
    return not isinstance(info, dict) or "router_manager" in info or "version" not in info


class ChunkParser:
    """Turns one request's answers (whole or streamed) into :class:`StreamDelta`\\ s."""

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id
        self.text = ""
        self.token_ids: list[int] = []

    def chunk(self, out: dict[str, Any]) -> StreamDelta:
        meta = out.get("meta_info", {})
        ids = list(out.get("output_ids") or [])
        num_done = int(meta.get("completion_tokens", len(ids)))
        # NOTE: cumulative ids number all tokens so far; incremental ones (--stream-output) fewer
        new_ids = ids if len(ids) < num_done else ids[len(self.token_ids):]
        self.token_ids.extend(new_ids)
        text = out.get("text", "")
        # NOTE: cumulative text may shrink at the end (a stop string streamed in part, then
        # trimmed): what was streamed stays, and only text beyond its length is new
        new_text = text[len(self.text):]
        self.text += new_text
        reason = meta.get("finish_reason")
        return StreamDelta(
            request_id=str(meta.get("id", self.request_id)), text=new_text, token_ids=new_ids,
            finished=reason is not None, finish_reason=_reason_type(reason),
            num_prompt_tokens=int(meta.get("prompt_tokens", 0)),
            num_cached_tokens=int(meta.get("cached_tokens", 0)),
            matched_stop=reason.get("matched") if isinstance(reason, dict) else None)


def _reason_type(reason: Any) -> Any:
    if reason is None:
        return None
    kind = reason.get("type") if isinstance(reason, dict) else str(reason)
    return kind if kind in ("stop", "length") else "abort"
