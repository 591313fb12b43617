"""Every cookbook notebook is stored with its outputs, and still runs top to bottom.

The notebooks are committed with their outputs (a reader sees results), refreshed by
``python cookbook/refresh.py``. Here each notebook runs once, a copy in a fresh kernel of this
interpreter, with the function refresh.py uses; a cell that raises fails the test.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import nbformat
import pytest

COOKBOOK = Path(__file__).resolve().parents[2] / "cookbook"
NOTEBOOKS = sorted(COOKBOOK.glob("*.ipynb"))


def _refresh_module():
    spec = importlib.util.spec_from_file_location("cookbook_refresh", COOKBOOK / "refresh.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_cookbook_has_its_notebooks():
    names = {p.stem for p in NOTEBOOKS}
    for topic in ("quickstart", "executor", "timeline", "llamaindex", "serving"):
        assert any(topic in name for name in names), f"no notebook on {topic}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stored_with_its_outputs(path):
    """Every code cell ran (in order, one run: python cookbook/refresh.py), none raised, the
    notebook shows results, and markdown explains what the code cells do."""
    book = nbformat.read(path, as_version=4)
    code = [c for c in book.cells if c.cell_type == "code"]
    counts = [c.execution_count for c in code]
    assert counts == list(range(1, len(code) + 1)), \
        f"{path.name}: run `python cookbook/refresh.py {path.stem[:2]}` before committing"
    outputs = [o for c in code for o in c.outputs]
    assert outputs and not [o for o in outputs if o.output_type == "error"]
    kinds = [c.cell_type for c in book.cells]
    assert kinds[0] == "markdown" and kinds.count("markdown") * 2 >= kinds.count("code")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path, tmp_path):
    book = nbformat.read(path, as_version=4)
    assert not _refresh_module().execute(book, tmp_path)
