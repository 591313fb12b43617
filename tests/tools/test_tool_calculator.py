"""calculator: safe evaluation, and rejection while the expression is still being written."""

from __future__ import annotations

import pytest

from agentrt.agent import ToolRuntime
from agentrt.agent.parsers.base import Piece
from agentrt_tools.calculator import PrefixValidator, evaluate, validate_prefix


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("200 * 701", 140200),
        ("2 ^ 10", 1024),
        ("sqrt(16) + max(1, 2)", 6.0),
        ("-(3 - 5) / 4", 0.5),
        ("7 // 2 + 7 % 2", 4),
        ("round(pi, 3)", 3.142),
    ],
)
def test_evaluate(expression, value):
    assert evaluate(expression) == value


@pytest.mark.parametrize(
    "expression",
    [
        "__import__('os').system('true')",
        "(1).__class__",
        "[1, 2]",
        "x + 1",
        "9 ** 9 ** 9",
        "*".join(["9 ** 9000"] * 3),  # each power is allowed, their product is not
        "factorial(10 ** 5)",
        "(-8) ** (1 / 3)",  # complex
        "-" * 100_000 + "1",  # deeper than the parser goes
        "+".join(["1"] * 5_000),  # deeper than the evaluator recurses
        "\uff50\uff49",  # fullwidth "pi": Python's parser reads it as pi
        "\u0661 + 1",  # an Arabic-Indic digit
        "open('f')",
        "lambda: 1",
    ],
)
def test_anything_but_arithmetic_is_refused(expression):
    with pytest.raises(ValueError):
        evaluate(expression)


def test_prefixes_of_valid_expressions_pass_and_invalid_ones_fail_early():
    good = "sqrt(2) * (3.5e2 + max(1, -4)) / tau"
    assert all(validate_prefix(good[:n]) is None for n in range(len(good) + 1))
    assert "unknown name 'os'" in validate_prefix("2 + os")
    assert "unexpected character '.'" in validate_prefix("os.")
    assert "expected a number" in validate_prefix("2 +* 3")
    assert "unbalanced" in validate_prefix("2)")
    assert "unexpected character '\u0661'" in validate_prefix("2 + \u0661")


def test_an_invalid_expression_aborts_the_call_on_a_prefix():
    with ToolRuntime(["calculator"]) as rt:
        call = rt.start("calculator")
        pieces = ["12 ", "* ", "__import__(", "'os')", ".system('x')"]
        rejected = None
        for n, text in enumerate(pieces):
            call.feed(Piece("delta", text, key="expression"))
            if call.wait():
                rejected = n
                break
        assert rejected == 2
        obs = call.finish()
        assert obs.is_error and "unknown name '__import__'" in obs.text
        assert rt.run("calculator", {"expression": "12 * 4"}).text == "48"


def test_huge_results_are_refused_fast_and_big_ones_are_printed():
    with ToolRuntime(["calculator"]) as rt:
        for expression in ("factorial(10 ** 7)", "round(5, -10 ** 18)", "(9 ** 9000) ** 2"):
            obs = rt.run("calculator", {"expression": expression})
            assert obs.is_error and "wall-time" not in obs.text, expression
            assert "more than 10000 digits" in obs.text or "at most 10000 digits" in obs.text
        # past the interpreter's 4,300-digit str() limit, within the calculator's 10,000 digits
        assert rt.run("calculator", {"expression": "10 ** 5000"}).text == "1.000000000000000e+5000"
        assert rt.run("calculator", {"expression": "factorial(20)"}).text == "2432902008176640000"


def test_streaming_validation_is_linear_in_the_expression():
    """Each streamed part re-tokenized the whole expression: a 40,000-character expression
    written a character at a time cost ~34 s of CPU (and hit the call's limits). Counting the
    characters the tokenizer is given keeps the test free of timing."""
    import agentrt_tools.calculator as calc

    expression = "+".join(["(1.5*2)"] * 5_000)
    validator, seen = calc.PrefixValidator(), []
    original = calc._TOKEN

    class Counting:
        def match(self, text, pos):
            seen.append(len(text) - pos)
            return original.match(text, pos)

    calc._TOKEN = Counting()
    try:
        assert all(validator.feed(c) is None for c in expression)
    finally:
        calc._TOKEN = original
    assert sum(seen) < 10 * len(expression)
    assert validator.feed(")") == "unbalanced ')'"
    assert validator.feed("1") == "unbalanced ')'"  # refused for good


def test_a_number_too_long_to_read_is_refused_while_written():
    validator = PrefixValidator()
    assert validator.feed("1" * 10_000) is None
    assert "more than 10000 characters" in validator.feed("1")


def test_a_power_with_a_huge_negative_exponent_is_a_tiny_number():
    assert evaluate("e ** -10**9") == 0.0
    assert evaluate("2 ** -3") == 0.125
    with pytest.raises(ValueError, match="more than 10000 digits"):
        evaluate("2 ** 10**9")
