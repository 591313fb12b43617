"""search: BM25 over a local corpus (the standard library's docstrings, or your own folder)."""

from __future__ import annotations

from agentrt_tools.search.corpus import Doc, SearchIndex, load_index
from agentrt_tools.search.tool import SearchTool

__all__ = ["Doc", "SearchIndex", "SearchTool", "load_index"]
