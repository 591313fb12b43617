"""calculator: safe arithmetic, validated while the expression is still being written.

Never ``eval``: the expression is parsed with :mod:`ast` and evaluated by walking a whitelist of
nodes — numbers, ``+ - * / // % **`` (``^`` means power), unary ``+``/``-``, parentheses, the
constants ``pi``, ``e``, ``tau`` and functions from :mod:`math` (``sqrt``, ``log``, ``sin``, …)
plus ``abs``, ``round``, ``min``, ``max``. Streamed parts of the ``expression`` argument are
checked at once by a small token-level state machine (allowed characters, known names, operand /
operator order, balanced parentheses), so ``__import__('os')`` or ``2 +* 3`` rejects the call
before the model finishes writing it. A result of more than 10,000 digits is refused before it is
computed (powers, ``factorial``) or as soon as it exists (products), and so is a ``round`` to more
than 10,000 places, instead of hanging the worker; a complex result is an error. Integers longer
than Python prints (4,300 digits) are shown in scientific notation.
"""

from __future__ import annotations

import ast
import decimal
import math
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from agentrt.agent.plugin import ArgumentInvocation, Invocation, Tool, ToolCallError
from agentrt.agent.sandbox import SandboxConfig

__all__ = ["CalculatorTool", "PrefixValidator", "evaluate", "validate_prefix"]

_CONSTANTS = {"pi": math.pi, "e": math.e, "tau": math.tau}
_FUNCTIONS: dict[str, Callable[..., Any]] = {
    name: getattr(math, name)
    for name in ("sqrt", "exp", "log", "log10", "log2", "sin", "cos", "tan", "asin", "acos",
                 "atan", "atan2", "sinh", "cosh", "tanh", "floor", "ceil", "factorial", "hypot",
                 "degrees", "radians", "gcd")
}
_FUNCTIONS.update({"abs": abs, "round": round, "min": min, "max": max})
_NESTING_ERRORS = (RecursionError, MemoryError)  # what the parser and _eval raise past their depth
_NAMES = sorted({*_CONSTANTS, *_FUNCTIONS})
_BINARY = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_TOKEN = re.compile(
    r"\s*(?:(?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d*)?)|(?P<name>[A-Za-z_]\w*)"
    r"|(?P<op>\*\*|//|[-+*/%^(),]))",
    re.ASCII,  # Python would read "ｐｉ" as pi and refuse "١٢": neither is arithmetic here
)
_MAX_DIGITS = 10_000


@dataclass(frozen=True)
class CalculatorTool(Tool):
    """Evaluate an arithmetic expression."""

    name: ClassVar[str] = "calculator"
    description: ClassVar[str] = (
        "Evaluate an arithmetic expression, e.g. '200 * 701' or 'sqrt(2) / 3'."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"expression": {"type": "string", "description": "the expression"}},
        "required": ["expression"],
    }
    main_argument: ClassVar[str | None] = "expression"
    sandbox: SandboxConfig = field(default_factory=lambda: SandboxConfig(max_wall_s=5.0))

    def start(self) -> Invocation:
        return _CalculatorCall(self)


class _CalculatorCall(ArgumentInvocation):
    def __init__(self, tool: CalculatorTool) -> None:
        super().__init__(tool)
        self.streamed: list[str] = []
        self.validator = PrefixValidator()

    def on_delta(self, key: str, text: str) -> None:
        if key == "expression":
            self.streamed.append(text)
            error = self.validator.feed(text)
            if error:
                written = "".join(self.streamed).strip()
                raise ToolCallError(f"calculator: {error} in {written!r}")

    def run(self, arguments: dict[str, Any]) -> str:
        try:
            return _format(evaluate(arguments["expression"]))
        except (ValueError, ArithmeticError, TypeError) as exc:
            raise ToolCallError(f"calculator: {exc}") from None


class PrefixValidator:
    """Checks the ``expression`` argument as it is streamed: each part once, so the whole check
    is linear in the expression's length (re-reading the whole text at each part was quadratic:
    ~34 s of CPU for 40,000 characters written a character at a time)."""

    def __init__(self) -> None:
        self._tail = ""  # not yet checked: a name or number that may still grow, or blanks
        self._open: list[bool] = []  # per open '(': whether it is a function call's
        self._expect_operand = True
        self._call: str | None = None  # a function name that '(' must follow
        self.error: str | None = None

    def feed(self, text: str) -> str | None:
        """Add the next part; an error (for good) if the text so far cannot start a valid
        expression, else None."""
        if self.error is None:
            self.error = self._check(self._tail + text)
        return self.error

    def _check(self, text: str) -> str | None:
        pos, tokens = 0, []
        while pos < len(text):  # NOTE: characters first, as in the whole text at once
            match = _TOKEN.match(text, pos)
            if not match or match.end() == pos:
                if text[pos:].strip() == "":
                    break
                return f"unexpected character {text[pos:].lstrip()[0]!r}"
            tokens.append((match.lastgroup or "", match.group(match.lastgroup or 0), pos))
            pos = match.end()
        for kind, value, start in tokens:
            if start == tokens[-1][2] and pos == len(text) and kind in ("name", "number"):
                return self._hold(kind, value, text[start:])  # may still grow
            error = self._step(kind, value)
            if error:
                return error
        self._tail = text[pos:]
        return None

    def _hold(self, kind: str, value: str, tail: str) -> str | None:
        """Keep the last token, which the next part may extend, for the next check."""
        if kind == "name" and not any(n.startswith(value) for n in _NAMES):
            return f"unknown name {value!r}"
        if kind == "number" and len(value) > _MAX_DIGITS:
            return f"a number of more than {_MAX_DIGITS} characters"
        if self._call is not None:
            return f"function {self._call!r} must be called"
        self._tail = tail
        return None

    def _step(self, kind: str, value: str) -> str | None:
        if self._call is not None:
            if value != "(":
                return f"function {self._call!r} must be called"
            self._call = None
            self._open.append(True)
        elif self._expect_operand:
            if kind == "number" or (kind == "name" and value in _CONSTANTS):
                self._expect_operand = False
            elif kind == "name" and value in _FUNCTIONS:
                self._call = value
            elif kind == "name":
                return f"unknown name {value!r}"
            elif value == "(":
                self._open.append(False)
            elif value not in "+-":
                return f"expected a number before {value!r}"
        elif kind == "op" and value == ")":
            if not self._open:
                return "unbalanced ')'"
            self._open.pop()
        elif kind == "op" and value == ",":
            if not self._open or not self._open[-1]:
                return "',' outside a function call"
            self._expect_operand = True
        elif kind == "op" and value != "(":
            self._expect_operand = True
        else:
            return f"expected an operator before {value!r}"
        return None


def validate_prefix(text: str) -> str | None:
    """An error if ``text`` cannot be the start of a valid expression, else None."""
    return PrefixValidator().feed(text)


def evaluate(expression: str) -> int | float:
    """Evaluate an arithmetic expression safely (see the module docstring)."""
    if not expression.isascii():  # as validate_prefix: the same answer streamed or whole
        raise ValueError(f"unexpected character {next(c for c in expression if ord(c) > 127)!r}")
    try:
        tree = ast.parse(expression.replace("^", "**").strip(), mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"invalid expression: {exc.msg}") from None
    except _NESTING_ERRORS:
        raise ValueError("invalid expression: too long or nested too deeply") from None
    try:
        return _eval(tree.body)
    except _NESTING_ERRORS:
        raise ValueError("invalid expression: too long or nested too deeply") from None


def _eval(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.Name) and node.id in _CONSTANTS:
        return _CONSTANTS[node.id]
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow):
            _check_power(left, right)
        return _check_result(_BINARY[type(node.op)](left, right))
    if (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCTIONS and not node.keywords
    ):
        args = [_eval(arg) for arg in node.args]
        _check_call(node.func.id, args)
        return _check_result(_FUNCTIONS[node.func.id](*args))
    raise ValueError(f"not allowed in an expression: {ast.unparse(node)!r}")


def _check_power(base: Any, exponent: Any) -> None:
    if abs(base) > 1 and exponent > 0 and exponent * math.log10(abs(base)) > _MAX_DIGITS:
        raise ValueError(f"result too large: more than {_MAX_DIGITS} digits")


def _check_call(name: str, args: list[Any]) -> None:
    """Refuse the calls whose cost grows with their arguments' values, before they run."""
    if name == "factorial" and args and type(args[0]) is int and args[0] > 1:
        if math.lgamma(min(args[0], 10**9) + 1) / math.log(10) > _MAX_DIGITS:
            raise ValueError(f"result too large: more than {_MAX_DIGITS} digits")
    if name == "round" and len(args) == 2 and type(args[1]) is int and abs(args[1]) > _MAX_DIGITS:
        raise ValueError(f"round: at most {_MAX_DIGITS} digits, got {args[1]}")


def _check_result(value: Any) -> Any:
    if isinstance(value, complex):
        raise ValueError("the result is not a real number")
    if type(value) is int and value.bit_length() * math.log10(2) > _MAX_DIGITS + 1:
        raise ValueError(f"result too large: more than {_MAX_DIGITS} digits")
    return value


def _format(value: Any) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e16:
        return str(int(value))
    try:
        return repr(value)
    except ValueError:  # an int longer than the interpreter prints (sys.get_int_max_str_digits)
        return format(decimal.Decimal(value), ".15e")
