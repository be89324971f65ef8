"""Exact arithmetic for the ``calculator`` tool, evaluated by walking the ``ast`` (never ``eval``).

Numbers are ``fractions.Fraction``, so ``0.1 + 0.2`` is exactly ``0.3`` and ``7 / 2`` is ``3.5``. Operators:
``+ - * / // % **`` and parentheses, on integer and decimal literals (``1_000``, ``2.5``, ``1e3``). Everything
else (names, calls, attributes, strings, comparisons) is refused. Sizes are bounded so that no expression a model
writes can hang the run: the text is at most ``MAX_LENGTH`` characters and every intermediate value at most
``MAX_BITS`` bits (``9**9**9`` is refused before it is computed).
"""

from __future__ import annotations

import ast
import decimal
from fractions import Fraction

from rlforge.envs.tool_schema import ToolError

MAX_LENGTH = 1000
"""Longest expression accepted, in characters."""

MAX_BITS = 10_000
"""Largest numerator or denominator of any intermediate value, in bits (about 3000 decimal digits)."""

MAX_DEPTH = 200
"""Deepest nesting of operators accepted (the walk recurses, and must stay well below Python's recursion limit)."""

SIGNIFICANT_DIGITS = 15
"""Digits shown of a result whose decimal expansion does not terminate (``1/3`` -> ``0.333333333333333``)."""

_MAX_EXACT_DECIMALS = 30

_BINARY = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
    ast.FloorDiv: lambda a, b: Fraction(a // b),
    ast.Mod: lambda a, b: a % b,
}


def evaluate(expression: str) -> Fraction:
    """The exact value of an arithmetic ``expression``.

    Args:
        expression: Text such as ``"(347 * 23) / 4"``.

    Raises:
        ToolError: The expression is too long, not arithmetic, divides by zero or grows too large.
    """
    if not isinstance(expression, str):
        raise ToolError(f"expression must be a string, got {type(expression).__name__}")
    if len(expression) > MAX_LENGTH:
        raise ToolError(f"expression is longer than {MAX_LENGTH} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError) as err:
        raise ToolError(f"invalid expression: {getattr(err, 'msg', None) or err}") from None
    try:
        return _walk(tree.body, expression.strip(), 0)
    except RecursionError:  # MAX_DEPTH is far below Python's limit; this is a last guard
        raise ToolError(f"expression is nested more than {MAX_DEPTH} deep") from None


def format_number(value: Fraction) -> str:
    """``value`` as decimal text: exact when the expansion is an integer or terminates within 30 decimals."""
    if value.denominator == 1:
        return str(value.numerator)
    den, twos, fives = value.denominator, 0, 0
    while den % 2 == 0:
        den, twos = den // 2, twos + 1
    while den % 5 == 0:
        den, fives = den // 5, fives + 1
    places = max(twos, fives)
    if den == 1 and places <= _MAX_EXACT_DECIMALS:
        scaled = abs(value.numerator) * 10**places // value.denominator
        sign = "-" if value < 0 else ""
        whole, frac = divmod(scaled, 10**places)
        return f"{sign}{whole}.{frac:0{places}d}".rstrip("0").rstrip(".")
    with decimal.localcontext() as ctx:
        ctx.prec = SIGNIFICANT_DIGITS
        approx = decimal.Decimal(value.numerator) / decimal.Decimal(value.denominator)
    return format(approx, "f") if abs(approx.adjusted()) < 20 else str(approx)


def _checked(value: Fraction) -> Fraction:
    if max(value.numerator.bit_length(), value.denominator.bit_length()) > MAX_BITS:
        raise ToolError(f"a result is too large (over {MAX_BITS} bits)")
    return value


def _literal(node: ast.Constant, source: str) -> Fraction:
    value = node.value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ToolError(f"unsupported literal {value!r}: only integer and decimal numbers")
    if isinstance(value, int):
        return _checked(Fraction(value))
    # The float has already lost exactness ("0.1"); read the literal's own text instead.
    text = ast.get_source_segment(source, node) or repr(value)
    try:
        return _checked(Fraction(text))
    except (ValueError, ZeroDivisionError):
        raise ToolError(f"unsupported number {text!r}") from None


def _power(base: Fraction, exponent: Fraction) -> Fraction:
    if exponent.denominator != 1:
        raise ToolError("exponents must be integers (a fractional power is not exact)")
    n = exponent.numerator
    if base in (0, 1) or n in (0, 1):
        if base == 0 and n < 0:
            raise ToolError("division by zero")
        return base**n
    if base == -1:
        return Fraction(-1 if n % 2 else 1)
    size = max(base.numerator.bit_length(), base.denominator.bit_length())
    if (size - 1) * abs(n) > MAX_BITS or abs(n) > MAX_BITS:  # a lower bound of the result's size, before computing
        raise ToolError(f"power too large (the result would exceed {MAX_BITS} bits)")
    return _checked(base**n)


def _walk(node: ast.AST, source: str, depth: int) -> Fraction:
    if depth > MAX_DEPTH:
        raise ToolError(f"expression is nested more than {MAX_DEPTH} deep")
    if isinstance(node, ast.Constant):
        return _literal(node, source)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        value = _walk(node.operand, source, depth + 1)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp):
        left, right = _walk(node.left, source, depth + 1), _walk(node.right, source, depth + 1)
        if isinstance(node.op, ast.Pow):
            return _power(left, right)
        op = _BINARY.get(type(node.op))
        if op is None:
            raise ToolError(f"unsupported operator {type(node.op).__name__}; use + - * / // % ** and parentheses")
        if right == 0 and isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)):
            raise ToolError("division by zero")
        return _checked(op(left, right))
    raise ToolError(f"unsupported syntax {type(node).__name__}: only numbers, + - * / // % ** and parentheses")
