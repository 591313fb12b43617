"""Log-probabilities in OpenAI's two answer shapes.

Chat (``logprobs: true``, ``top_logprobs`` 0-20): ``choices[].logprobs.content``, one
:class:`TokenLogprob` per answer token (built by :func:`agentrt.chat.logprobs.token_logprobs`).
The legacy ``/v1/completions`` (``logprobs``: an integer 0-20, as vLLM bounds it; OpenAI's
own limit is 5): ``choices[].logprobs`` = :class:`CompletionLogprobs`, four parallel lists —
each generated token's text (as the tokenizer decodes it alone, special tokens included), its
log-probability, its ``logprobs`` likeliest alternatives (``{text: logprob}``, the sampled
token added when it is not among them, as vLLM and OpenAI do) and the token's offset in the
answer's text (the sum of the earlier tokens' texts). Streamed, each chunk carries the entries
of its own tokens.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

__all__ = ["ChoiceLogprobs", "CompletionLogprobs", "LegacyLogprobs", "TokenLogprob",
           "TopLogprob"]


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None = None


class TokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob] = Field(default_factory=list)


class ChoiceLogprobs(BaseModel):
    content: list[TokenLogprob] | None = None


class CompletionLogprobs(BaseModel):
    tokens: list[str] = Field(default_factory=list)
    token_logprobs: list[float | None] = Field(default_factory=list)
    top_logprobs: list[dict[str, float]] = Field(default_factory=list)
    text_offset: list[int] = Field(default_factory=list)


class LegacyLogprobs:
    """One completion choice's logprobs as they come: the whole answer's and each chunk's."""

    def __init__(self, tokenizer: Any, top: int) -> None:
        self.tokenizer = tokenizer
        self.top = top
        self.whole = CompletionLogprobs()
        self._offset = 0

    def add(self, token_ids: list[int], logprobs: list[dict[int, float]]
            ) -> CompletionLogprobs:
        """Record the entries of ``token_ids`` (one engine logprobs dict each); those entries
        alone, for a streamed chunk."""
        fresh = CompletionLogprobs()
        for token, entry in zip(token_ids, logprobs, strict=True):
            text = self.tokenizer.decode([token])
            best = sorted(entry.items(), key=lambda kv: -kv[1])[:self.top]
            if token in entry and token not in dict(best):
                best.append((token, entry[token]))
            fresh.tokens.append(text)
            fresh.token_logprobs.append(entry.get(token))
            fresh.top_logprobs.append({self.tokenizer.decode([t]): lp for t, lp in best})
            fresh.text_offset.append(self._offset)
            self._offset += len(text)
        for name in CompletionLogprobs.model_fields:
            getattr(self.whole, name).extend(getattr(fresh, name))
        return fresh
