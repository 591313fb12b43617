"""A real retrieval corpus: the standard library's module docstrings, cut into chunks.

The documents are :func:`agentrt_tools.search.corpus.stdlib_corpus`'s (one per stdlib module,
the same on every machine with the same Python); each is split at blank lines into
paragraph-aligned chunks of at most ``max_chars`` characters, in a deterministic order.
:func:`default_index` embeds the first ``n`` chunks into a :class:`VectorIndex`, with the chunk
list and the embeddings cached under ``agentrt.env.cache_dir()/rag`` (the embeddings as
``.npy``, keyed by a hash of the model and the texts), so a second call, in this process or a
new one, loads without running the model.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import sys
import sysconfig
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import numpy as np

from agentrt import env
from agentrt_tools.search.corpus import Doc, stdlib_corpus

if TYPE_CHECKING:
    from agentrt_tools.rag.embeddings import Embedder
    from agentrt_tools.rag.index import VectorIndex

__all__ = [
    "cached_embeddings",
    "chunk_corpus",
    "chunk_docs",
    "chunk_text",
    "default_index",
]

_CHUNKS_FORMAT = 1  # bump when the chunking changes, to drop cached chunk lists
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")


def chunk_text(text: str, max_chars: int = 600) -> list[str]:
    """``text`` cut into chunks of at most ``max_chars`` characters, at paragraph boundaries.

    Consecutive paragraphs (separated by blank lines) are packed into one chunk while they
    fit. A paragraph longer than ``max_chars`` is cut at line ends, a line at spaces, and a word
    longer than ``max_chars`` at ``max_chars``.
    """
    if max_chars < 1:
        raise ValueError("max_chars must be positive")
    pieces: list[str] = []
    for paragraph in _PARAGRAPH_BREAK.split(text):
        paragraph = paragraph.strip("\n").rstrip()
        if paragraph.strip():
            pieces += _fit(paragraph, max_chars)
    return _pack(pieces, max_chars, "\n\n")


def _fit(paragraph: str, max_chars: int) -> list[str]:
    """``paragraph`` as parts of at most ``max_chars``: whole, else lines, else words."""
    if len(paragraph) <= max_chars:
        return [paragraph]
    lines: list[str] = []
    for line in paragraph.split("\n"):
        if len(line) <= max_chars:
            lines.append(line)
            continue
        words: list[str] = []
        for word in line.split(" "):
            words += [word[i:i + max_chars] for i in range(0, len(word), max_chars)] or [""]
        lines += _pack(words, max_chars, " ")
    return _pack(lines, max_chars, "\n")


def _pack(parts: list[str], max_chars: int, sep: str) -> list[str]:
    """Join consecutive ``parts`` (each at most ``max_chars``) with ``sep`` into chunks of at
    most ``max_chars``; chunks that are only whitespace are dropped."""
    chunks: list[str] = []
    current: str | None = None
    for part in parts:
        if current is None:
            current = part
        elif len(current) + len(sep) + len(part) <= max_chars:
            current += sep + part
        else:
            chunks.append(current)
            current = part
    if current is not None:
        chunks.append(current)
    return [c.strip() for c in chunks if c.strip()]


def chunk_docs(max_chars: int = 600) -> list[Doc]:
    """The stdlib corpus as chunks: ``Doc(source="python stdlib: json #2", text=...)``.

    Deterministic for a given Python installation; a chunk whose text equals an earlier one is
    left out, so every text appears once. Cached in memory and on disk.
    """
    return list(_chunk_docs(max_chars))


def chunk_corpus(max_chars: int = 600) -> list[str]:
    """The texts of :func:`chunk_docs`: the stdlib docstring corpus as chunks of at most
    ``max_chars`` characters, in a deterministic order, without duplicates."""
    return [doc.text for doc in _chunk_docs(max_chars)]


@functools.lru_cache(maxsize=8)
def _chunk_docs(max_chars: int) -> tuple[Doc, ...]:
    path = _cache_root() / f"chunks-{_stdlib_key()}-{max_chars}.json"
    try:
        cached = json.loads(path.read_text(encoding="utf-8"))
        return tuple(Doc(source, text) for source, text in cached)
    except (OSError, ValueError, TypeError):
        pass
    docs: list[Doc] = []
    seen: set[str] = set()
    for doc in stdlib_corpus():
        for n, text in enumerate(chunk_text(doc.text, max_chars)):
            if text not in seen:
                seen.add(text)
                docs.append(Doc(f"{doc.source} #{n + 1}", text))
    payload = json.dumps([[d.source, d.text] for d in docs]).encode("utf-8")
    _write_atomic(path, lambda f: f.write(payload))
    return tuple(docs)


def _stdlib_key() -> str:
    ident = f"{_CHUNKS_FORMAT}|{sys.version}|{sys.platform}|{sysconfig.get_paths()['stdlib']}"
    return f"stdlib-{sys.version_info.major}.{sys.version_info.minor}-" + _digest(ident)


def cached_embeddings(texts: Sequence[str], embedder: Embedder | None = None) -> np.ndarray:
    """The embeddings of ``texts`` (float32, ``(len(texts), dim)``), from the disk cache.

    The cache file is ``cache_dir()/rag/embeddings/<hash>.npy``, the hash taken over the model
    name, its input length and every text; on a miss the texts are embedded (with ``embedder``,
    default the shared :meth:`Embedder.load`) and the file is written. The model is not loaded
    on a hit.
    """
    from agentrt_tools.rag.embeddings import _MAX_SEQ_LENGTH, MODEL_NAME

    texts = list(texts)
    name = embedder.name if embedder is not None else MODEL_NAME
    seq = embedder.max_seq_length if embedder is not None else _MAX_SEQ_LENGTH
    digest = hashlib.sha256(f"{name}|{seq}|{len(texts)}".encode())
    for text in texts:
        digest.update(b"\0" + text.encode("utf-8"))
    path = _cache_root() / "embeddings" / f"{digest.hexdigest()[:32]}.npy"
    try:
        vectors = np.load(path, allow_pickle=False)
        if vectors.dtype == np.float32 and vectors.ndim == 2 and len(vectors) == len(texts):
            return vectors
    except (OSError, ValueError):
        pass
    if embedder is None:
        from agentrt_tools.rag.embeddings import Embedder

        embedder = Embedder.load()
    vectors = embedder.embed(texts, batch_size=embedder.max_batch_size)
    _write_atomic(path, lambda f: np.save(f, vectors, allow_pickle=False))
    return vectors


def default_index(
    n_docs: int | None = None, *, max_chars: int = 600, embedder: Embedder | None = None
) -> VectorIndex:
    """A :class:`VectorIndex` over the first ``n_docs`` chunks of :func:`chunk_docs` (None: all).

    Each row's metadata is ``{"source": "python stdlib: <module> #<n>"}``. Embeddings come from
    :func:`cached_embeddings`, so only the first call for a given set of chunks runs the model;
    the model is loaded later, by the first :meth:`VectorIndex.search_text`.
    """
    from agentrt_tools.rag.index import VectorIndex

    docs = _chunk_docs(max_chars)[:n_docs]
    texts = [d.text for d in docs]
    vectors = cached_embeddings(texts, embedder)
    return VectorIndex.from_texts(
        texts, vectors, [{"source": d.source} for d in docs], embedder=embedder
    )


def _cache_root() -> Path:
    return env.cache_dir() / "rag"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _write_atomic(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Write a file through a temporary one and a rename, so readers never see half of it.
    A cache that cannot be written (read-only home, full disk) is skipped silently."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                write(f)
            os.chmod(tmp, 0o644)  # mkstemp makes 0600 files; a cache is readable like others
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError:
        pass
