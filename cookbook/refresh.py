"""Re-run the cookbook's notebooks and store them with their outputs.

    python cookbook/refresh.py                 # every notebook, in place
    python cookbook/refresh.py 03 05           # the notebooks whose names contain 03 or 05

Each notebook runs top to bottom in a fresh kernel of this interpreter (the project's virtual
environment, whatever kernel specs the machine has), in a temporary working folder, and is
written back with its outputs only if no cell raised. tests/cookbook/test_notebooks.py runs the
notebooks the same way (``execute``) and checks that the stored ones carry their outputs.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import nbclient
import nbformat
from jupyter_client.manager import KernelManager
from tqdm import tqdm

COOKBOOK = Path(__file__).resolve().parent
TIMEOUT_S = 600


class ThisPythonKernel(KernelManager):
    """A kernel manager that starts ipykernel with this interpreter."""

    def format_kernel_cmd(self, extra_arguments=None):
        # NOTE: tqdm.auto warns in a kernel without ipywidgets; the bars still print as text
        return [sys.executable, "-W", "ignore:IProgress not found", "-m", "ipykernel_launcher",
                "-f", self.connection_file]


def execute(book: nbformat.NotebookNode, cwd: Path) -> list[str]:
    """Run ``book`` in place (its outputs replaced) in a fresh kernel working in ``cwd``;
    returns the error outputs' texts (empty when every cell ran)."""
    client = nbclient.NotebookClient(book, timeout=TIMEOUT_S, kernel_name="python3",
                                     resources={"metadata": {"path": str(cwd)}})
    client.kernel_manager_class = ThisPythonKernel
    try:
        client.execute()
    except nbclient.exceptions.CellExecutionError as error:
        return [str(error)]
    _merge_streams(book)
    return [f"{o.ename}: {o.evalue}" for c in book.cells if c.cell_type == "code"
            for o in c.outputs if o.output_type == "error"]


def _merge_streams(book: nbformat.NotebookNode) -> None:
    """A cell's consecutive prints to one stream stored as one output (a streamed answer
    arrives a token at a time)."""
    for cell in book.cells:
        merged: list = []
        for out in cell.get("outputs", []):
            last = merged[-1] if merged else None
            if last and out.output_type == last.output_type == "stream" and out.name == last.name:
                last.text += out.text
            else:
                merged.append(out)
        if cell.cell_type == "code":
            cell.outputs = merged


def notebooks(patterns: list[str]) -> list[Path]:
    """The cookbook's notebooks whose names contain one of ``patterns`` (all if none)."""
    found = sorted(COOKBOOK.glob("*.ipynb"))
    chosen = [p for p in found if not patterns or any(s in p.name for s in patterns)]
    if not chosen:
        names = ", ".join(p.name for p in found)
        raise SystemExit(f"no notebook matches {patterns}; the cookbook has {names}")
    return chosen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help="refresh only the notebooks whose file names contain NAME")
    args = parser.parse_args(argv)
    failed = []
    bar = tqdm(notebooks(args.names), unit="notebook")
    for path in bar:
        bar.set_description(path.stem)
        book = nbformat.read(path, as_version=4)
        start = time.perf_counter()
        with tempfile.TemporaryDirectory() as cwd:
            errors = execute(book, Path(cwd))
        if errors:
            failed.append(path.name)
            tqdm.write(f"{path.name}: not written, a cell raised:\n" + "\n".join(errors))
        else:
            nbformat.write(book, path)
            tqdm.write(f"{path.name}: {time.perf_counter() - start:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
