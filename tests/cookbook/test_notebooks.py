"""Every cookbook notebook runs top to bottom on the default model, and is stored clean.

Notebooks are committed without outputs (so no output is ever stale) and executed here in a
fresh kernel of this interpreter; a cell that raises fails the test with its traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbclient
import nbformat
import pytest

COOKBOOK = Path(__file__).resolve().parents[2] / "cookbook"
NOTEBOOKS = sorted(COOKBOOK.glob("*.ipynb"))


def test_the_cookbook_has_its_notebooks():
    names = {p.stem for p in NOTEBOOKS}
    for topic in ("quickstart", "executor", "timeline", "llamaindex", "serving"):
        assert any(topic in name for name in names), f"no notebook on {topic}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stored_without_outputs(path):
    book = nbformat.read(path, as_version=4)
    for cell in book.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, \
                f"{path.name}: clear the outputs before committing"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path, tmp_path):
    book = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        book, timeout=600, kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}})
    client.kernel_manager_class = _this_python_kernel()
    client.execute()
    errors = [o for c in book.cells if c.cell_type == "code" for o in c.outputs
              if o.output_type == "error"]
    assert not errors


def _this_python_kernel():
    """A kernel manager that starts ipykernel with this interpreter (the project's venv),
    whatever kernel specs the machine has installed."""
    from jupyter_client.manager import KernelManager

    class ThisPythonKernel(KernelManager):
        def format_kernel_cmd(self, extra_arguments=None):
            return [sys.executable, "-m", "ipykernel_launcher", "-f", self.connection_file]

    return ThisPythonKernel
