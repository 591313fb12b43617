"""An exact vector index over texts: faiss ``IndexFlatIP`` on unit vectors, i.e. cosine search.

faiss is imported when the first index is made, with an error naming ``pip install faiss-cpu``
when it is missing. Texts and their metadata are kept beside the faiss index, so a search
returns :class:`Hit` s that carry the text, not only row numbers.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from agentrt.core.openmp import release_openmp_pool

if TYPE_CHECKING:
    from agentrt_tools.rag.embeddings import Embedder

__all__ = ["Hit", "VectorIndex", "import_faiss"]

FAISS_INSTALL_HINT = "pip install faiss-cpu"


def import_faiss() -> Any:
    """The ``faiss`` module, or a :class:`ModuleNotFoundError` that says how to install it."""
    try:
        import faiss
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(
            "agentrt_tools.rag's VectorIndex needs faiss: "
            f"`{FAISS_INSTALL_HINT}` (or `pip install agentrt[rag]`)",
            name=exc.name,
        ) from exc
    return faiss


@dataclass(frozen=True)
class Hit:
    """One search result: the text, its cosine similarity to the query, and its row."""

    text: str
    score: float
    index: int
    """The row of the text in the :class:`VectorIndex` (the order it was added in)."""
    metadata: dict[str, Any] = field(default_factory=dict)


class VectorIndex:
    """Texts and their embeddings in a faiss ``IndexFlatIP`` (exact inner-product search).

    Vectors are expected L2-normalised (as :class:`~agentrt_tools.rag.Embedder` makes them),
    so scores are cosine similarities in ``[-1, 1]``.

    >>> index = VectorIndex()
    >>> index.add(["The cat sat on the mat.", "Stocks fell sharply today."])
    [0, 1]
    >>> index.search_text("a kitten on a rug", k=1)[0].text
    'The cat sat on the mat.'

    Thread-safe: ``add`` and the faiss part of a search take one lock (faiss's flat index is
    not safe to read while it grows), so a search sees every row of an ``add`` or none of them.
    An index pickles with its rows and vectors (``pickle.dump`` is how to save one); its
    embedder pickles as the shared model.
    """

    def __init__(self, embedder: Embedder | None = None, dim: int | None = None) -> None:
        """An empty index.

        Args:
            embedder: embeds texts given without vectors and the queries of
                :meth:`search_text`. None: the shared :meth:`Embedder.load` model, loaded at
                the first call that needs it (an index built from precomputed vectors and
                searched by vector never loads it).
            dim: the vector width; default the embedder's, else 384 (all-MiniLM-L6-v2).
        """
        faiss = import_faiss()
        self._embedder = embedder
        self.dim = int(dim if dim is not None else (embedder.dim if embedder else 384))
        self._faiss = faiss.IndexFlatIP(self.dim)
        self._texts: list[str] = []
        self._metadatas: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    @classmethod
    def from_texts(
        cls,
        texts: Sequence[str],
        vectors: np.ndarray | None = None,
        metadatas: Sequence[Mapping[str, Any]] | None = None,
        *,
        embedder: Embedder | None = None,
    ) -> VectorIndex:
        """A new index holding ``texts`` (see :meth:`add`)."""
        index = cls(embedder=embedder, dim=None if vectors is None else np.shape(vectors)[1])
        index.add(texts, vectors=vectors, metadatas=metadatas)
        return index

    @property
    def embedder(self) -> Embedder:
        """The embedder of this index (the shared model, loaded now if none was given)."""
        if self._embedder is None:
            from agentrt_tools.rag.embeddings import Embedder

            self._embedder = Embedder.load()
        return self._embedder

    @property
    def texts(self) -> list[str]:
        """The indexed texts, in row order (a copy)."""
        return list(self._texts)

    @property
    def metadatas(self) -> list[dict[str, Any]]:
        """The metadata of each row, in row order (a copy)."""
        return [dict(m) for m in self._metadatas]

    def vectors(self) -> np.ndarray:
        """All stored vectors, shape ``(len(self), dim)``, float32."""
        with self._lock:
            if not self._texts:
                return np.empty((0, self.dim), dtype=np.float32)
            return self._faiss.reconstruct_n(0, len(self._texts))

    def add(
        self,
        texts: Sequence[str],
        vectors: np.ndarray | None = None,
        metadatas: Sequence[Mapping[str, Any]] | None = None,
    ) -> list[int]:
        """Add ``texts`` and return their rows.

        Args:
            texts: the texts to index.
            vectors: their embeddings, shape ``(len(texts), dim)``, unit-norm; None: embed
                ``texts`` with :attr:`embedder`.
            metadatas: one mapping per text, returned in :attr:`Hit.metadata`.

        Raises:
            TypeError: ``texts`` is one string, or one of its items is not a string.
            ValueError: ``vectors`` or ``metadatas`` do not match ``texts``.
        """
        if isinstance(texts, str):
            raise TypeError("add() takes a sequence of texts, not one string")
        texts = list(texts)
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"texts[{i}] is {type(text).__name__}, not str")
        metas = [dict(m) for m in metadatas] if metadatas is not None else [{} for _ in texts]
        if len(metas) != len(texts):
            raise ValueError(f"{len(texts)} texts but {len(metas)} metadatas")
        if vectors is None:
            vectors = self.embedder.embed(texts)
        matrix = self._as_matrix(vectors)
        if matrix.shape[0] != len(texts):
            raise ValueError(f"{len(texts)} texts but {matrix.shape[0]} vectors")
        with self._lock:
            start = len(self._texts)
            if texts:
                self._faiss.add(matrix)
            self._texts += texts
            self._metadatas += metas
        return list(range(start, start + len(texts)))

    @overload
    def search(self, query: np.ndarray, k: int = 4) -> list[Hit] | list[list[Hit]]: ...

    @overload
    def search(self, query: Sequence[float], k: int = 4) -> list[Hit]: ...

    def search(self, query: Any, k: int = 4) -> list[Hit] | list[list[Hit]]:
        """The ``k`` nearest texts to a query vector, best first.

        A single vector (shape ``(dim,)``) gives ``list[Hit]``; a matrix of query vectors
        (shape ``(n, dim)``) gives one such list per row. Fewer than ``k`` hits come back when
        the index holds fewer than ``k`` texts; ``k=0`` gives none. Duplicate texts are rows of
        their own, each a hit; equal scores come in faiss's order.

        Raises:
            TypeError: ``k`` is not an int.
            ValueError: ``k`` is negative, or the vectors are not ``dim`` wide.
        """
        array = np.asarray(query, dtype=np.float32)
        if array.ndim == 1:
            return self.search(array[None, :], k)[0]
        _check_k(k)
        matrix = self._as_matrix(array)
        with self._lock:
            k = min(int(k), len(self._texts))
            if k == 0 or matrix.shape[0] == 0:
                return [[] for _ in range(matrix.shape[0])]
            try:
                scores, rows = self._faiss.search(matrix, k)
            finally:
                release_openmp_pool()  # faiss's OpenMP workers would slow the engine's thread
            return [
                [
                    Hit(self._texts[r], float(s), int(r), dict(self._metadatas[r]))
                    for s, r in zip(score_row, row_ids, strict=True)
                    if r >= 0
                ]
                for score_row, row_ids in zip(scores, rows, strict=True)
            ]

    def search_text(self, query: str, k: int = 4) -> list[Hit]:
        """The ``k`` texts nearest to ``query`` (embedded with :attr:`embedder`), best first."""
        _check_k(k)
        return self.search(self.embedder.embed_query(query), k)  # type: ignore[return-value]

    async def asearch_text(self, query: str, k: int = 4) -> list[Hit]:
        """:meth:`search_text` in a worker thread (embedding and faiss search), so the event
        loop keeps running."""
        import anyio.to_thread

        return await anyio.to_thread.run_sync(self.search_text, query, k)

    def __getstate__(self) -> dict[str, Any]:
        faiss = import_faiss()
        with self._lock:
            state = {key: value for key, value in self.__dict__.items()
                     if key not in ("_lock", "_faiss", "_texts", "_metadatas")}
            state["_texts"], state["_metadatas"] = list(self._texts), list(self._metadatas)
            state["_faiss"] = faiss.serialize_index(self._faiss)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._faiss = import_faiss().deserialize_index(state["_faiss"])
        self._lock = threading.Lock()

    def _as_matrix(self, vectors: Any) -> np.ndarray:
        matrix = np.ascontiguousarray(np.asarray(vectors, dtype=np.float32))
        if matrix.ndim != 2 or matrix.shape[1] != self.dim:
            raise ValueError(f"expected vectors of shape (n, {self.dim}), got {matrix.shape}")
        return matrix

    def __len__(self) -> int:
        return len(self._texts)

    def __repr__(self) -> str:
        return f"VectorIndex({len(self)} texts, dim={self.dim})"


def _check_k(k: Any) -> None:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"k must be an int, got {type(k).__name__}")
    if k < 0:
        raise ValueError(f"k must be at least 0, got {k}")
