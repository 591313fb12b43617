"""Every code block of the README and of docs/ is executed or checked here, so an example
cannot go stale without failing.

The convention, by the block's fence:

- ```python blocks run as written, each in a fresh namespace (a block may not lean on names an
  earlier block defined), in a temporary working folder, and must leave no request paused.
- ```bash blocks are commands. ``agentrt ...`` (also ``.venv/bin/agentrt``, ``python -m
  agentrt``) is parsed by the real argparse parser of the CLI: a flag that does not exist fails.
  ``python benchmarks/NAME.py ...`` must name a script that exists and defines every flag given.
  Commands that download or install (``pip install``, ``hf download``, ``ollama pull``) or start
  other programs (``python -m sglang_router...``) are checked for shell syntax only: nothing is
  installed or downloaded here. The README's two Quickstart blocks are what CI runs
  (``.ci/run``; tests/test_readme.py checks they are the same).
- ```text / ```console blocks, and fences without a language, are output or diagrams: not run.

Kept cheap: ``Engine()`` with no arguments, and the engine ``ChatAgentRT()`` / ``AgentRT()``
share when given none, are the session's engine (the default model the docs load), and the
server example talks to one ``agentrt serve`` started for this module on a free loopback port
instead of 8000. Generations in the docs stay short (``max_tokens`` of a few dozen at most).
"""

from __future__ import annotations

import re
import shlex
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_PORT_URL = "http://127.0.0.1:8000/v1"
FENCE = re.compile(r"^(#+ [^\n]*)$|^```(\w*)\n(.*?)^```$", re.M | re.S)
CHECKED_ONLY = ("pip", "hf", "ollama", "huggingface-cli")


def _blocks(lang: str) -> list[tuple[str, str]]:
    """(where: FILE (heading), the code) of each block fenced as ``lang``, in order."""
    found = []
    for path in DOCS:
        heading = ""
        for match in FENCE.finditer(path.read_text()):
            if match.group(1):
                heading = match.group(1).lstrip("# ")
            elif match.group(2) == lang:
                found.append((f"{path.relative_to(ROOT)} ({heading})", match.group(3)))
    return found


PYTHON = _blocks("python")
BASH = [(where, code) for where, code in _blocks("bash") if "Quickstart" not in where]


def _ids(blocks: list[tuple[str, str]]) -> list[str]:
    return [f"{i}-{where[:40]}" for i, (where, _) in enumerate(blocks)]


@pytest.fixture(scope="module")
def shared_engine(engine, tmp_path_factory):
    """``Engine()`` and the integrations' shared engine are the session engine; blocks run in
    a temporary folder (the tools example writes a database file)."""
    import agentrt
    from agentrt.chat import engines

    real = agentrt.Engine

    def engine_or_new(*args, **kwargs):
        return engine if not kwargs and args in ((), (None,)) else real(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(agentrt, "Engine", engine_or_new)
        patch.setattr(engines, "Engine", engine_or_new)
        patch.chdir(tmp_path_factory.mktemp("docs"))
        yield engine


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    sys.path.insert(0, str(ROOT / "tests" / "server"))
    from serve_harness import start_server

    with start_server(tmp_path_factory.mktemp("readme") / "serve.log") as server:
        yield server


def test_the_readme_has_an_example_per_front_end():
    readme = [code for where, code in PYTHON if where.startswith("README")]
    code = "\n".join(readme)
    for needed in ("create_agent", "ChatAgentRT", "agentrt.Executor", "FunctionAgent",
                   "OpenAI(base_url"):
        assert needed in code, needed
    assert len((ROOT / "README.md").read_bytes()) <= 15_000, "the README is a front page"


def test_every_fence_follows_the_convention():
    for path in DOCS:
        for match in FENCE.finditer(path.read_text()):
            assert match.group(2) in (None, "", "python", "bash", "text", "console"), \
                f"{path.name}: a ```{match.group(2)} block; see this test's docstring"


@pytest.mark.parametrize("where,code", PYTHON, ids=_ids(PYTHON))
def test_python_block_runs(where, code, shared_engine, request):
    """... alone, and leaves no request paused: an example that kept a request's KV for good
    would teach a leak (and hold the session engine's blocks for every later test)."""
    if README_PORT_URL in code:
        code = code.replace(README_PORT_URL, request.getfixturevalue("server").base_url)
    paused = shared_engine.load().num_paused
    module = types.ModuleType("docs_example")  # NOTE: a real module: dataclasses look it up
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(sys.modules, module.__name__, module)
        exec(compile(code, where, "exec"), module.__dict__)  # noqa: S102
    assert shared_engine.load().num_paused == paused


def _commands(code: str) -> list[list[str]]:
    """The simple commands of a shell block (continuations joined, comments and ``&``, ``&&``,
    ``;``, ``|`` separators dropped)."""
    commands = []
    for line in code.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split, lexer.commenters = True, "#"
        current: list[str] = []
        for token in lexer:  # NOTE: a syntax error (an unclosed quote) raises here
            if set(token) <= set("&;|"):
                commands.append(current)
                current = []
            else:
                current.append(token)
        commands.append(current)
    return [c for c in commands if c]


def _check_command(words: list[str]) -> None:
    from agentrt.cli import build_parser

    program = Path(words[0]).name
    if program == "agentrt":
        args = words[1:]
    elif program == "python" and words[1:3] == ["-m", "agentrt"]:
        args = words[3:]
    elif program == "python" and words[1].startswith("benchmarks/"):
        script = ROOT / words[1]  # its flags may live in a shared _helper.py beside it
        source = script.read_text() + "".join(
            p.read_text() for p in script.parent.glob("_*.py"))
        for flag in (w.split("=")[0] for w in words[2:] if w.startswith("--")):
            assert re.search(rf"{flag}(?![\w-])", source), f"{words[1]} has no {flag}"
        return
    elif program in CHECKED_ONLY or (program == "python" and words[1] == "-m"):
        return  # NOTE: downloads, installs and other programs: shell syntax only
    else:
        raise AssertionError(f"no rule for the command {words}: add one to this test")
    try:
        build_parser().parse_args(args)
    except SystemExit as exit:
        raise AssertionError(f"agentrt refuses {args}") from exit


@pytest.mark.parametrize("where,code", BASH, ids=_ids(BASH))
def test_shell_block_parses(where, code):
    for words in _commands(code):
        _check_command(words)
