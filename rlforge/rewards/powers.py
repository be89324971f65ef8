"""Powers in answers: a bound on the size of the numbers they make, and exact values of small ones.

sympy evaluates integer powers eagerly, in C, holding the GIL: ``(((9^{200})^{200})^{200})^{200}`` is
``9^{1.6e9}``, which no deadline can stop. :func:`result_bits` bounds, before anything is evaluated, the bits
of the largest rational any power in an answer can produce (nested powers multiply: the bound of ``a^b`` is
``bits(a) · |b|``), so costly answers are refused on their cost, not their syntax (``2^{2^{3}}`` is fine).
:func:`parse_power` gives the exact value of a number written as a power (``2^{10}``, ``3 \\times 10^{5}``)
after the same check.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

__all__ = ["MAX_RESULT_BITS", "parse_power", "result_bits"]

MAX_RESULT_BITS = 32_768
"""Largest number (in bits, about 9,900 decimal digits) an answer may make sympy build."""

_MAX_NESTING = 100
_NUMBER = re.compile(r"\d+(?:\.\d*)?|\.\d+", re.ASCII)
_TOKEN = re.compile(rf"\\[A-Za-z]+|{_NUMBER.pattern}|\S", re.ASCII)
_OPEN = {"{": "}", "(": ")", "[": "]"}


def _number_bits(text: str) -> tuple[float, int | None]:
    value = Fraction(text)
    if value.denominator == 1:
        return float(value.numerator.bit_length()), value.numerator
    return float(value.numerator.bit_length() + value.denominator.bit_length()), None


class _Bounder:
    """Recursive descent over LaTeX tokens; each item is ``(bits, exact integer or None)``."""

    def __init__(self, text: str) -> None:
        self.tokens = _TOKEN.findall(text)
        self.pos = 0

    def sequence(self, closer: str | None, depth: int) -> tuple[float, int | None]:
        """Bound of the items up to ``closer``: sums and products both stay within the sum of the bits
        (plus one per item for carries); the exact value is kept for a lone, optionally signed integer."""
        if depth > _MAX_NESTING:
            return math.inf, None
        items: list[tuple[float, int | None]] = []
        sign = 1
        while self.pos < len(self.tokens):
            tok = self.tokens[self.pos]
            self.pos += 1
            if tok == closer:
                break
            if tok == "^":
                base = items.pop() if items else (0.0, None)
                items.append(self.power(base, self.atom(depth)))
            elif tok == "!" and items:
                items.append(self.factorial(items.pop()))
            elif tok in _OPEN:
                items.append(self.sequence(_OPEN[tok], depth + 1))
            elif _NUMBER.fullmatch(tok):
                items.append(_number_bits(tok))
            elif tok[0].isalpha() or tok.startswith("\\"):
                items.append((1.0, None))  # a symbol or a command: its arguments come as their own items
            elif tok == "-" and not items:
                sign = -1
        bits = sum(b for b, _ in items) + len(items)
        exact = items[0][1] if len(items) == 1 and items[0][1] is not None else None
        return bits, (None if exact is None else sign * exact)

    def atom(self, depth: int) -> tuple[float, int | None]:
        """The exponent after ``^``: a group, or one token (a whole digit run, to over- rather than under-count)."""
        if self.pos >= len(self.tokens):
            return 0.0, None
        tok = self.tokens[self.pos]
        self.pos += 1
        if tok in _OPEN:
            return self.sequence(_OPEN[tok], depth + 1)
        if _NUMBER.fullmatch(tok):
            return _number_bits(tok)
        return 1.0, None

    @staticmethod
    def power(base: tuple[float, int | None], exponent: tuple[float, int | None]) -> tuple[float, int | None]:
        (base_bits, base_value), (exp_bits, exp_value) = base, exponent
        # |e| <= 2^bits(e) for any rational e (and for symbols, counted as 1 bit: x^{n} stays symbolic).
        size = abs(exp_value) if exp_value is not None else (2.0**exp_bits if exp_bits < 1000 else math.inf)
        bits = max(base_bits, 1.0) * max(size, 1.0)
        if base_value is not None and exp_value is not None and 0 <= exp_value and bits <= 64:
            return bits, base_value**exp_value  # small: exact, so 2^{2^{3}} bounds as 2^8, not 2^(2^bits)
        return bits, None

    @staticmethod
    def factorial(item: tuple[float, int | None]) -> tuple[float, None]:
        bits, value = item
        n = abs(value) if value is not None else (2.0**bits if bits < 1000 else math.inf)
        return n * math.log2(max(n, 2.0)), None


def result_bits(text: str) -> float:
    """An upper bound on the bits of the largest number evaluating ``text`` exactly can create (``inf`` if huge).

    Args:
        text: A normalised LaTeX answer.
    """
    return _Bounder(text).sequence(None, 0)[0]


_PLAIN = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)"
_POWER = re.compile(
    rf"^(?:(?P<coef>{_PLAIN})\s*(?:\\times|\\cdot|\*)\s*)?"
    rf"(?:(?P<base>\d+(?:\.\d*)?)|\(\s*(?P<pbase>{_PLAIN})\s*\)|\{{\s*(?P<bbase>{_PLAIN})\s*\}})"
    r"\s*\^\s*(?:\{\s*(?P<exp>[-+]?\d{1,6})\s*\}|(?P<digit>\d))$"
)


def parse_power(s: str) -> Fraction | None:
    """The exact value of a number written as a power, or ``None``.

    Forms: ``b^{e}`` / ``b^e`` (one digit, as LaTeX reads it), ``(-b)^{e}``, ``{b}^{e}``, optionally after a
    coefficient and ``\\times``/``\\cdot``/``*`` (``3 \\times 10^{5}``), with a leading sign; ``b`` and the
    coefficient are plain decimals, ``e`` an integer. Powers whose value would exceed ``MAX_RESULT_BITS`` bits
    and ``0`` to a negative power are ``None``.

    Args:
        s: A normalised answer.
    """
    sign = 1
    m = _POWER.match(s)
    if m is None and s[:1] == "-":
        sign, m = -1, _POWER.match(s[1:].lstrip())
    if m is None:
        return None
    base = Fraction(m.group("base") or m.group("pbase") or m.group("bbase"))
    exponent = int(m.group("exp") or m.group("digit"))
    if base == 0 and exponent < 0:
        return None
    if abs(exponent) * (base.numerator.bit_length() + base.denominator.bit_length()) > MAX_RESULT_BITS:
        return None
    value = base**exponent
    if m.group("coef"):
        value *= Fraction(m.group("coef"))
    return sign * value
