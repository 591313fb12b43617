"""The command line: helpful --help, a real run on the default model, clear errors."""

from __future__ import annotations

from typing import get_args

import pytest

from agentrt.backends import BACKENDS
from agentrt.cli import build_parser, main
from agentrt.config import DType, Quantization


def test_help_lists_commands_and_options(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    assert "run" in text and "chat" in text and "SmolLM2" in text
    run_help = build_parser()._subparsers._group_actions[0].choices["run"].format_help()
    for flag in ("--model", "--dtype", "--quantization", "--gguf-activations", "--max-tokens",
                 "--temperature", "--stop", "--raw"):
        assert flag in run_help


def test_run_answers_on_the_default_model(capsys, engine):
    assert main(["run", "--max-tokens", "12", "--stats", "What is the capital of France?"]) == 0
    captured = capsys.readouterr()
    assert "Paris" in captured.out
    assert "eval rate:" in captured.err and "tokens/s" in captured.err


def test_bad_model_is_a_clear_error(capsys):
    assert main(["run", "--model", "/no/such/model", "hi"]) == 1
    assert "not found" in capsys.readouterr().err


def test_run_with_int4_weights_answers_the_same(capsys, engine):
    """The default model's layers ship as Q4_1: int4 reproduces the float answer."""
    question = "What is the capital of France?"
    assert main(["run", "--max-tokens", "12", question]) == 0
    plain = capsys.readouterr().out
    assert main(["run", "--max-tokens", "12", "--quantization", "int4", question]) == 0
    assert capsys.readouterr().out == plain


def test_run_on_the_integer_path_answers(capsys, engine):
    """--gguf-activations int8 reaches the engine (llama.cpp's numeric path on the Q4_1 file:
    here, like llama.cpp on this file, it answers with a French landmark, not "Paris")."""
    assert main(["run", "--max-tokens", "12", "--gguf-activations", "int8",
                 "What is the capital of France?"]) == 0
    assert capsys.readouterr().out.strip()
    with pytest.raises(SystemExit):
        main(["run", "--gguf-activations", "int4", "hi"])
    assert "'int8'" in capsys.readouterr().err


def _help(command: str) -> str:
    return build_parser()._subparsers._group_actions[0].choices[command].format_help()


def test_choices_come_from_the_config_literals_and_the_backend_registry(monkeypatch):
    run_help, serve_help = _help("run"), _help("serve")
    for name in (*get_args(Quantization), *get_args(DType)):
        assert name in run_help
    assert "{" + ",".join(get_args(Quantization)) + "}" in run_help  # argparse's choice list
    assert "{" + ",".join(BACKENDS.names()) + "}" in serve_help
    monkeypatch.setitem(BACKENDS._entries, "toy", "toy_backend:ToyBackend")
    assert "{" + ",".join(BACKENDS.names()) + "}" in _help("serve")  # a new backend is offered


def test_an_unknown_quantization_is_refused_with_the_choices(capsys):
    with pytest.raises(SystemExit) as e:
        main(["run", "--quantization", "int3", "hi"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "int3" in err and all(repr(q) in err for q in get_args(Quantization))


def test_threads_reach_the_engine(capsys, monkeypatch):
    """--threads and --cpu-decode-threads become the engine's num_threads and
    cpu_decode_threads (the engine is not built: the options are what is tested)."""
    import agentrt

    seen = {}

    class Stop(Exception):
        pass

    def fake_engine(model=None, **options):
        seen.update(options)
        raise Stop

    monkeypatch.setattr(agentrt, "Engine", fake_engine)
    with pytest.raises(Stop):
        main(["run", "--threads", "1", "--cpu-decode-threads", "fixed", "hi"])
    assert seen["num_threads"] == 1 and seen["cpu_decode_threads"] == "fixed"
    for bad in (["--threads", "0"], ["--cpu-decode-threads", "some"]):
        with pytest.raises(SystemExit):
            main(["run", *bad, "hi"])
    err = capsys.readouterr().err
    assert "'adaptive'" in err and "'fixed'" in err
