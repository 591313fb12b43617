"""Local corpora for the search tool, and their BM25 indexes cached on disk.

The default corpus is built at first use from text that ships with Python: the module docstrings
of the standard library (read from the source files without importing them). Any folder of
``.txt``/``.md`` files works too; long files are cut into passages at blank lines. An index is
built with bm25s once and cached under ``agentrt.env.cache_dir()/search/<key>``, where the key
changes with the Python version or with the folder's file names, sizes and times.
"""

from __future__ import annotations

import ast
import hashlib
import io
import json
import os
import sys
import sysconfig
import tokenize
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agentrt import env

__all__ = ["Doc", "SearchIndex", "folder_corpus", "load_index", "stdlib_corpus"]

_SKIP_DIRS = frozenset(
    {"test", "tests", "idlelib", "turtledemo", "site-packages", "dist-packages", "lib2to3",
     "ensurepip", "__pycache__", "venv"}
)
_PASSAGE_CHARS = 1_500


@dataclass(frozen=True)
class Doc:
    """One searchable passage and where it came from."""

    source: str
    text: str


def stdlib_corpus() -> list[Doc]:
    """The module docstrings of the standard library, one document per module."""
    root = Path(sysconfig.get_paths()["stdlib"])
    docs = []
    for path in _python_files(root):
        rel = path.relative_to(root)
        text = _module_docstring(path)
        if text and len(text) > 40:
            module = ".".join(rel.with_suffix("").parts).removesuffix(".__init__")
            docs.append(Doc(f"python stdlib: {module}", text))
    return docs


def _python_files(root: Path) -> list[Path]:
    files = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith("."))
        files += [Path(folder, n) for n in sorted(names) if n.endswith(".py")]
    return files


def _module_docstring(path: Path) -> str | None:
    try:
        source = path.read_text(encoding="utf-8", errors="replace")
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.ENCODING):
                continue
            if token.type != tokenize.STRING:
                return None
            value = ast.literal_eval(token.string)
            return value.strip() if isinstance(value, str) else None
    except (SyntaxError, ValueError, tokenize.TokenError, OSError):
        return None
    return None


def folder_corpus(folder: str | Path) -> list[Doc]:
    """Passages of every ``.txt`` and ``.md`` file under ``folder``."""
    root = Path(folder)
    docs = []
    for path in sorted(_corpus_files(root)):
        text = path.read_text(encoding="utf-8", errors="replace")
        for n, passage in enumerate(_passages(text)):
            docs.append(Doc(f"{path.relative_to(root)}#{n + 1}", passage))
    return docs


def _corpus_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.suffix.lower() in (".txt", ".md") and p.is_file()]


def _passages(text: str) -> list[str]:
    passages, current = [], ""
    for block in text.split("\n\n"):
        if current and len(current) + len(block) > _PASSAGE_CHARS:
            passages.append(current.strip())
            current = ""
        current += block + "\n\n"
    if current.strip():
        passages.append(current.strip())
    return passages


class SearchIndex:
    """A BM25 index over documents."""

    def __init__(self, retriever: Any, docs: list[Doc]) -> None:
        self.retriever, self.docs = retriever, docs

    @classmethod
    def build(cls, docs: list[Doc]) -> SearchIndex:
        import bm25s

        retriever = bm25s.BM25()
        retriever.index(_tokenize([d.text for d in docs]), show_progress=False)
        return cls(retriever, docs)

    def search(self, query: str, k: int) -> list[tuple[Doc, float]]:
        """The top ``k`` documents for ``query`` with their BM25 scores (best first)."""
        vocab = self.retriever.vocab_dict
        terms = [t for t in _tokenize([query])[0] if t in vocab]
        if not terms or not self.docs:
            return []
        k = min(k, len(self.docs))
        ids, scores = self.retriever.retrieve([terms], k=k, show_progress=False)
        hits = [(self.docs[int(i)], float(s)) for i, s in zip(ids[0], scores[0], strict=True)]
        return [(doc, score) for doc, score in hits if score > 0]

    def save(self, folder: Path) -> None:
        self.retriever.save(str(folder), show_progress=False)
        docs = [asdict(d) for d in self.docs]
        (folder / "docs.json").write_text(json.dumps(docs), encoding="utf-8")

    @classmethod
    def load(cls, folder: Path) -> SearchIndex:
        import bm25s

        retriever = bm25s.BM25.load(str(folder), show_progress=False)
        docs = [Doc(**d) for d in json.loads((folder / "docs.json").read_text("utf-8"))]
        return cls(retriever, docs)


def _tokenize(texts: list[str]) -> list[list[str]]:
    import bm25s

    return bm25s.tokenize(texts, stopwords="en", return_ids=False, show_progress=False)


def load_index(folder: str | Path | None = None) -> SearchIndex:
    """The cached index of ``folder`` (None: the standard library corpus), built if needed."""
    key = _cache_key(folder)
    cached = env.cache_dir() / "search" / key
    if (cached / "docs.json").is_file():
        return SearchIndex.load(cached)
    docs = stdlib_corpus() if folder is None else folder_corpus(folder)
    index = SearchIndex.build(docs)
    tmp = cached.with_name(cached.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    index.save(tmp)
    if not cached.exists():
        tmp.rename(cached)
    return index


def _cache_key(folder: str | Path | None) -> str:
    if folder is None:
        return f"stdlib-{sys.version_info.major}.{sys.version_info.minor}-{sys.platform}"
    root = Path(folder).resolve()
    digest = hashlib.sha1(str(root).encode())
    for path in sorted(_corpus_files(root)):
        stat = path.stat()
        digest.update(f"{path.relative_to(root)}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return f"folder-{root.name}-{digest.hexdigest()[:16]}"
