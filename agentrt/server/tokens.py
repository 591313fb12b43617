"""``POST /tokenize`` and ``POST /detokenize``: the served model's tokenizer, in vLLM's shapes.

vLLM's, not llama-server's (``content`` / ``add_special`` / ``with_pieces`` in,
``{"tokens"}`` and ``{"content"}`` out): vLLM's are the ones SGLang serves too, and its
answer carries what a client budgeting a context needs (``count``, ``max_model_len``).
A llama-server body (``content`` without ``prompt``) is a 400 saying so.

- ``/tokenize`` ``{"prompt": "text", "add_special_tokens": true}`` →
  ``{"count", "max_model_len", "tokens", "token_strs"}`` (``token_strs`` with
  ``"return_token_strs": true``, else null). With ``{"messages": [...], "tools"?,
  "chat_template_kwargs"?}`` instead, the tokens are exactly the prompt a chat request of
  those messages and tools is prefilled with (``count`` = its ``usage.prompt_tokens``);
- ``/detokenize`` ``{"tokens": [ids]}`` → ``{"prompt": "text"}`` (special tokens kept, as
  vLLM decodes them); an id outside the vocabulary is a 400 naming ``tokens``.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import anyio
from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field, field_validator

from agentrt.server.errors import APIError
from agentrt.server.limits import check_text
from agentrt.server.state import ServerState, State

__all__ = ["DetokenizeRequest", "TokenizeRequest", "router"]

router = APIRouter()


class TokenizeRequest(BaseModel):
    """vLLM's ``/tokenize`` body: a ``prompt`` or a chat's ``messages`` (and ``tools``)."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    prompt: str | None = None
    messages: list[dict[str, Any]] | None = Field(None, min_length=1)
    tools: list[dict[str, Any]] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    add_special_tokens: bool | None = None
    """For a ``prompt``: add the tokenizer's special tokens (default true, vLLM's); a chat
    prompt is tokenized as the chat endpoint does (its template writes them)."""
    return_token_strs: bool = False
    content: Any = None
    """llama-server's field: refused with a pointer to ``prompt``."""

    @field_validator("*", mode="before")
    @classmethod
    def _valid_text(cls, value: Any, info: Any) -> Any:
        return check_text(value, info.field_name)


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    tokens: list[int]


@router.post("/tokenize")
async def tokenize(body: TokenizeRequest, state: State) -> dict[str, Any]:
    """The token ids of a text or of a chat's prompt (vLLM's ``/tokenize``)."""
    state.resolve_model(body.model)
    if (body.prompt is None) == (body.messages is None):
        hint = " (llama-server's `content`: send it as `prompt`)" \
            if body.content is not None else ""
        raise APIError(400, f"give either prompt (a text) or messages (a chat){hint}",
                       param="prompt")
    ids = await anyio.to_thread.run_sync(partial(_token_ids, state, body))
    strs = [state.tokenizer.convert_ids_to_tokens(i) for i in ids] \
        if body.return_token_strs else None
    return {"count": len(ids), "max_model_len": state.max_model_len, "tokens": ids,
            "token_strs": strs}


def _token_ids(state: ServerState, body: TokenizeRequest) -> list[int]:
    if body.prompt is not None:
        special = True if body.add_special_tokens is None else body.add_special_tokens
        return state.tokenizer.encode(body.prompt, add_special_tokens=special)
    from agentrt.chat import prepare_chat

    try:
        return prepare_chat(state.backend, body.messages, tools=body.tools or (),
                            chat_template_kwargs=body.chat_template_kwargs,
                            max_tokens=1).prompt_ids
    except ValueError as exc:
        raise APIError.bad_request(exc, param="messages") from exc


@router.post("/detokenize")
async def detokenize(body: DetokenizeRequest, state: State) -> dict[str, str]:
    """The text of token ids (vLLM's ``/detokenize``)."""
    state.resolve_model(body.model)
    vocab = len(state.tokenizer)
    bad = [t for t in body.tokens if not 0 <= t < vocab]
    if bad:
        raise APIError(400, f"token id {bad[0]} is outside the vocabulary (0 to {vocab - 1})",
                       param="tokens")
    text = await anyio.to_thread.run_sync(
        partial(state.tokenizer.decode, body.tokens, skip_special_tokens=False))
    return {"prompt": text}
