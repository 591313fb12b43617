"""The search tool: BM25 over a local corpus, started the moment the query argument closes.

The index (the standard library's docstrings by default, or a folder of text/markdown files) is
loaded when the session opens, so a call only scores. The search runs as soon as the ``query``
argument is complete — while the model may still be writing ``k`` or other arguments — and
``finish`` only formats the top ``k`` hits with a snippet and the source of each.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from agentrt.agent.plugin import ArgumentInvocation, Invocation, Tool, ToolSession
from agentrt.agent.sandbox import SandboxConfig
from agentrt_tools.search.corpus import Doc, SearchIndex, load_index

__all__ = ["SearchTool"]

_WORD = re.compile(r"\w+")
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n\s*\n")
#: longest part of the query repeated in a "no results" observation
_MAX_QUERY_SHOWN = 200


@dataclass(frozen=True)
class SearchTool(Tool):
    """Keyword search (BM25) over local documents."""

    name: ClassVar[str] = "search"
    description: ClassVar[str] = (
        "Search the local documents for a query; returns the best passages with their sources."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "what to look for"},
            "k": {"type": "integer", "description": "how many results (default 3)"},
        },
        "required": ["query"],
    }
    main_argument: ClassVar[str | None] = "query"
    preload: tuple[str, ...] = ("bm25s",)

    #: a folder of .txt/.md files; None: the Python standard library's docstrings
    corpus: str | None = None
    top_k: int = 3
    max_k: int = 10
    snippet_chars: int = 300
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)

    def open_session(self, workdir: Path) -> ToolSession:
        return _SearchSession(self, load_index(self.corpus))


class _SearchSession(ToolSession):
    def __init__(self, tool: SearchTool, index: SearchIndex) -> None:
        super().__init__(tool)
        self.tool: SearchTool = tool
        self.index = index

    def start(self) -> Invocation:
        return _SearchCall(self)


class _SearchCall(ArgumentInvocation):
    def __init__(self, session: _SearchSession) -> None:
        super().__init__(session.tool)
        self.session = session
        self.hits: list[tuple[Doc, float]] = []

    def on_value(self, key: str, value: Any) -> None:
        if key == "query":
            self.hits = self.session.index.search(value, self.session.tool.max_k)

    def run(self, arguments: dict[str, Any]) -> str:
        tool = self.session.tool
        k = max(1, min(int(arguments.get("k", tool.top_k)), tool.max_k))
        hits = self.hits[:k]
        if not hits:
            query = arguments["query"]
            if len(query) > _MAX_QUERY_SHOWN:  # a megabyte query must not come back whole
                query = query[:_MAX_QUERY_SHOWN] + "…"
            return f"no results for {query!r}"
        lines = []
        for n, (doc, score) in enumerate(hits, 1):
            snippet = _snippet(doc.text, arguments["query"], tool.snippet_chars)
            lines.append(f"{n}. [{doc.source}] (score {score:.2f})\n{snippet}")
        return "\n\n".join(lines)


def _snippet(text: str, query: str, max_chars: int) -> str:
    """The sentence of ``text`` that shares the most words with the query, trimmed."""
    terms = {w.lower() for w in _WORD.findall(query)}
    sentences = [s.strip() for s in _SENTENCE.split(text) if s.strip()]
    best = max(sentences, key=lambda s: len(terms & {w.lower() for w in _WORD.findall(s)}))
    best = " ".join(best.split())
    return best if len(best) <= max_chars else best[: max_chars - 1].rstrip() + "…"
