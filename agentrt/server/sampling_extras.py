"""vLLM's sampling extras both OpenAI endpoints honour: ``ignore_eos``, ``stop_token_ids``,
``min_tokens``.

Benchmark and agent clients send them to vLLM, SGLang and llama-server alike
(``extra_body={"ignore_eos": True}``), so agentrt serves them on ``/v1/completions`` and on
``/v1/chat/completions``:

- ``ignore_eos``: the model's EOS does not end the answer (the engine's own option). On chat
  the end-of-turn token is the EOS, so the answer runs on to ``max_tokens``, as on vLLM;
  with tools or a ``response_format`` it is a 400 (the grammar ends the answer there);
- ``stop_token_ids``: these ids end the answer too;
- ``min_tokens``: the EOS and ``stop_token_ids`` cannot be sampled before this many tokens
  (a logits processor on the local engine; not on ``--backend sglang``, and not with tools or
  a ``response_format``, whose grammar owns the logits). Stop strings still end the answer
  (vLLM holds them back until ``min_tokens`` too).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from agentrt.core.sampling_params import SamplingParams
from agentrt.server.errors import APIError

if TYPE_CHECKING:
    import torch

    from agentrt.server.state import ServerState

__all__ = ["MinTokens", "VLLMSampling", "with_extras"]


class VLLMSampling(BaseModel):
    """The request fields (mixed into both OpenAI requests)."""

    ignore_eos: bool = False
    """vLLM's extension: the model's EOS does not end the answer (benchmark clients)."""
    stop_token_ids: list[int] | None = None
    """vLLM's extension: these token ids end the answer too."""
    min_tokens: int = Field(0, ge=0)
    """vLLM's extension: the EOS and ``stop_token_ids`` are held back for this many tokens."""


class MinTokens:
    """A logits processor: ``stop_ids`` cannot be sampled before ``min_tokens`` tokens."""

    def __init__(self, min_tokens: int, stop_ids: set[int]) -> None:
        self.min_tokens = min_tokens
        self.stop_ids = sorted(stop_ids)

    def __call__(self, output_token_ids: list[int], logits_row: torch.Tensor) -> torch.Tensor:
        if len(output_token_ids) < self.min_tokens:
            logits_row[[i for i in self.stop_ids if i < logits_row.numel()]] = float("-inf")
        return logits_row


def with_extras(params: SamplingParams, body: VLLMSampling, state: ServerState
                ) -> SamplingParams:
    """``params`` with the request's extras; a 400 naming the field that cannot be honoured
    with the rest of the request."""
    if body.ignore_eos and params.grammar is not None:
        raise APIError(400, "ignore_eos cannot be combined with tools or response_format "
                            "(the grammar ends the answer)", param="ignore_eos")
    changes: dict[str, Any] = {}
    if body.ignore_eos:
        changes["ignore_eos"] = True
    if body.stop_token_ids:
        changes["stop_token_ids"] = (*params.stop_token_ids, *body.stop_token_ids)
    if body.min_tokens > 0:
        if params.grammar is not None or params.logits_processor is not None:
            raise APIError(400, "min_tokens cannot be combined with tools or response_format "
                                "(the grammar decides where the answer may end)",
                           param="min_tokens")
        if state.engine is None:
            raise APIError(400, f"min_tokens={body.min_tokens} is not supported by agentrt in "
                                f"front of a {state.backend.name} backend; leave it out or use 0",
                           param="min_tokens")
        eos = () if body.ignore_eos else state.backend.model_info.eos_token_ids
        stop_ids = {*eos, *changes.get("stop_token_ids", params.stop_token_ids)}
        if stop_ids:
            changes["logits_processor"] = MinTokens(body.min_tokens, stop_ids)
    return replace(params, **changes) if changes else params
