"""search: real BM25 over the standard library's docstrings or a folder, started at the query."""

from __future__ import annotations

import pytest

pytest.importorskip("bm25s", reason="needs the [tools] extra")

from agentrt.agent import ToolRuntime  # noqa: E402
from agentrt.agent.parsers.base import Piece  # noqa: E402
from agentrt_tools.search import SearchTool, load_index  # noqa: E402


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        folder = tmp_path_factory.mktemp("cache")
        patch.setenv("AGENTRT_CACHE", str(folder))
        yield folder


@pytest.fixture(scope="module")
def notes(tmp_path_factory):
    folder = tmp_path_factory.mktemp("notes")
    (folder / "garden.md").write_text(
        "# Garden\n\nTomatoes need six hours of sun and deep watering twice a week.\n\n"
        "Basil grows well next to tomatoes.\n"
    )
    (folder / "bikes.txt").write_text("Check the tyre pressure before every long ride.\n")
    (folder / "ignored.py").write_text("tomatoes = 1\n")
    return folder


def test_default_corpus_is_the_standard_library_docstrings(cache):
    index = load_index()
    assert len(index.docs) > 200
    assert index.docs[0].source.startswith("python stdlib: ")
    assert (cache / "search").is_dir()  # cached for the next time
    sources = [doc.source for doc, _ in index.search("JSON encoder and decoder", 3)]
    assert "python stdlib: json" in sources


def test_search_tool_returns_top_k_with_snippets_and_sources(cache, notes):
    with ToolRuntime([SearchTool(corpus=str(notes))]) as rt:
        obs = rt.run("search", {"query": "how much sun do tomatoes need", "k": 1})
        assert obs.text.startswith("1. [garden.md#1] (score ")
        assert "Tomatoes need six hours of sun" in obs.text
        assert "2." not in obs.text
        assert rt.run("search", {"query": "zeppelin"}).text == "no results for 'zeppelin'"


def test_search_starts_when_the_query_closes(cache):
    with ToolRuntime(["search"]) as rt:
        call = rt.start("search")
        call.feed(Piece("argument", key="query", value="compress files with gzip"))
        call.wait()  # the search has run: only formatting is left for finish()
        call.feed(Piece("argument", key="k", value=2))
        obs = call.finish()
    query_timing = obs.timings[0]
    assert query_timing.ended <= obs.finish_started
    assert obs.text.count("\n\n") == 1 and "gzip" in obs.text.lower()


def test_a_huge_query_without_results_is_not_echoed_whole(cache, notes):
    with ToolRuntime([SearchTool(corpus=str(notes))]) as rt:
        obs = rt.run("search", {"query": "zeppelin " * 100_000})
    assert not obs.is_error and obs.text.startswith("no results for 'zeppelin zeppelin")
    assert len(obs.text) < 300 and obs.text.endswith("…'")
