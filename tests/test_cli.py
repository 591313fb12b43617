"""The command line: helpful --help, a real run on the default model, clear errors."""

from __future__ import annotations

import pytest

from agentrt.cli import build_parser, main


def test_help_lists_commands_and_options(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    assert "run" in text and "chat" in text and "SmolLM2" in text
    run_help = build_parser()._subparsers._group_actions[0].choices["run"].format_help()
    for flag in ("--model", "--dtype", "--quantization", "--max-tokens", "--temperature",
                 "--stop", "--raw"):
        assert flag in run_help


def test_run_answers_on_the_default_model(capsys, engine):
    assert main(["run", "--max-tokens", "12", "--stats", "What is the capital of France?"]) == 0
    captured = capsys.readouterr()
    assert "Paris" in captured.out
    assert "tok/s" in captured.err


def test_bad_model_is_a_clear_error(capsys):
    assert main(["run", "--model", "/no/such/model", "hi"]) == 2
    assert "not found" in capsys.readouterr().err


def test_run_with_int4_weights_answers_the_same(capsys, engine):
    """The default model's layers ship as Q4_1: int4 reproduces the float answer."""
    question = "What is the capital of France?"
    assert main(["run", "--max-tokens", "12", question]) == 0
    plain = capsys.readouterr().out
    assert main(["run", "--max-tokens", "12", "--quantization", "int4", question]) == 0
    assert capsys.readouterr().out == plain
