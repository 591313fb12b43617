"""Token log-probabilities in OpenAI's chat form (``choices[].logprobs.content``), for every
front end: the server's answers, ``ChatAgentRT``'s ``response_metadata["logprobs"]``."""

from __future__ import annotations

from typing import Any

__all__ = ["token_logprobs"]


def token_logprobs(tokenizer: Any, token_ids: list[int], logprobs: list[dict[int, float]],
                   top: int) -> list[dict[str, Any]]:
    """OpenAI's per-token entries for ``token_ids`` (one engine logprobs dict each; special
    tokens, such as the end of the turn, left out): each token's text as the tokenizer
    decodes it alone, that text's UTF-8 ``bytes``, its log-probability, and its ``top``
    likeliest alternatives, best first."""
    special = set(tokenizer.all_special_ids)
    out = []
    for token, entry in zip(token_ids, logprobs, strict=True):
        if token in special or token not in entry:
            continue  # NOTE: not in entry: a forced token, not the one sampled
        best = sorted(entry.items(), key=lambda kv: -kv[1])[:top]
        out.append({**_entry(tokenizer, token, entry[token]),
                    "top_logprobs": [_entry(tokenizer, t, lp) for t, lp in best]})
    return out


def _entry(tokenizer: Any, token: int, logprob: float) -> dict[str, Any]:
    text = tokenizer.decode([token])
    return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}
