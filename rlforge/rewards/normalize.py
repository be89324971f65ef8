"""Answer normalisation, plain-number parsing, and a guard against answers too costly to verify.

Normalisation (:func:`normalize_answer`) is applied the same way to the target and to the extracted
answer: surrounding whitespace, ``$...$`` / ``\\(...\\)`` / ``\\[...\\]``, a whole ``\\boxed{}``,
markdown ``**``, ``\\text{}``-like wrappers, ``\\left``/``\\right`` and LaTeX spacing, ``\\dfrac``/
``\\tfrac``, degree signs, currency (``$``, ``\\$``), thousands separators (``1,000``, ``1{,}000``,
``1\\,000``), a trailing ``.``, a single-variable assignment (``x = 5`` -> ``5``) and unit words after
a number (``72 dollars``, ``5 cm``, ``5 \\text{cm}^2``). A percent sign is treated as a unit and
dropped, so ``50%`` equals ``50`` (the GSM8K convention), NOT ``0.5``. Nothing is evaluated.
"""

from __future__ import annotations

import re
from fractions import Fraction

from rlforge.rewards.powers import MAX_RESULT_BITS, result_bits

__all__ = ["is_too_costly", "normalize_answer", "parse_number"]

_MAX_DIGITS = 60  # longest digit run accepted anywhere (bounds big-integer work)
_MAX_BRACE_DEPTH = 20  # deeper nesting risks recursion limits in the LaTeX parser

_WRAPPERS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))
_BOX = re.compile(r"^\\(?:boxed|fbox)\s*\{(.*)\}$", re.DOTALL)
_TEXT_CMD = re.compile(r"\\(?:text|textbf|textit|textrm|mathrm|mathbf|mbox|operatorname)\s*\{([^{}]*)\}")
_SPACING = re.compile(r"\\[,;:! ]|\\(?:left|right|displaystyle)\b|\\q?quad\b")
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|°")
_THOUSANDS_TEX = re.compile(r"(?<=\d)\{,\}(?=\d{3})")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_SPACE_GROUPED = re.compile(r"^[-+]?\d{1,3}(?: \d{3})+(?:\.\d+)?$")  # 1 000 000 (also from 1\,000\,000)
_ASSIGNMENT = re.compile(r"^[A-Za-z]\s*=\s*([^=]+)$")
_NUMBER_TEXT = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:\s*/\s*\d+)?"
_PAREN_NUMBER = re.compile(rf"^\(\s*({_NUMBER_TEXT})\s*\)$")
_HEDGE_WORDS = r"(?!(?:or|and|to|plus|minus|times|over|divided|not)\b)"
_NUMBER_THEN_WORDS = re.compile(
    rf"^({_NUMBER_TEXT})\s+{_HEDGE_WORDS}[A-Za-z][A-Za-z .]{{0,40}}?(?:\^\{{?[23]\}}?|[²³])?$"
)
_ATTACHED_UNIT = re.compile(
    rf"^({_NUMBER_TEXT})(?:cm|mm|km|m|kg|mg|g|lbs?|oz|ft|mph|kmh|hrs?|min|sec|s|ml|l)(?:\^\{{?[23]\}}?|[²³])?$"
)

_DECIMAL = re.compile(r"^[-+]?(?:\d+(?:\.\d*)?|\.\d+)$")
_SLASH_FRAC = re.compile(r"^([-+]?\d+)/(\d+)$")
_TEX_FRAC = re.compile(r"^([-+]?)\\frac(?:\{([-+]?\d+)\}\{(\d+)\}|(\d)(\d))$")

_DIGIT_RUN = re.compile(rf"\d{{{_MAX_DIGITS + 1},}}")
_CLOSED_FORM_BREAKERS = re.compile(r"\\(?:sum|prod|int|iint|iiint|oint|lim|partial)(?![A-Za-z])")
_COMBINATORIAL = re.compile(r"\\(?:[dt]?binom|choose|Gamma)(?![A-Za-z])|!")
_FACTORIAL_OK = re.compile(r"(?:^|[^0-9)}\]!])(?:\d{1,3}|[A-Za-z])!")


def _balanced(s: str) -> bool:
    """Whether unescaped braces in ``s`` pair up (so ``\\boxed{1} + \\boxed{2}`` is not one box)."""
    depth = 0
    for tok in re.findall(r"\\[{}]|[{}]", s):
        if tok == "{":
            depth += 1
        elif tok == "}":
            depth -= 1
            if depth < 0:
                return False
    return depth == 0


def _unwrap(s: str) -> str:
    """Peel outer wrappers until none is left (bounded: each pass shortens the string)."""
    while True:
        before = s
        s = s.strip().strip("*").strip()
        for left, right in _WRAPPERS:
            if len(s) >= len(left) + len(right) and s.startswith(left) and s.endswith(right):
                s = s[len(left) : len(s) - len(right)].strip()
                break
        box = _BOX.match(s)
        if box and _balanced(box.group(1)):
            s = box.group(1)
        s = s.rstrip(".").strip()
        if s == before:
            return s


def normalize_answer(text: str, max_chars: int = 200) -> str:
    """Canonical text of one answer; ``""`` when empty or longer than ``max_chars`` (then it never scores).

    Args:
        text: Raw answer text from an extractor, or a dataset target.
        max_chars: Longest answer accepted, measured before and after normalisation.
    """
    if len(text) > 4 * max_chars:
        return ""
    s = _unwrap(text.replace("\u2212", "-"))
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = _SPACING.sub(" ", s)
    for _ in range(3):  # \text{\textbf{5}}: a few levels are plenty
        s = _TEXT_CMD.sub(r"\1", s)
    s = _DEGREES.sub("", s)
    s = s.replace("\\$", "").replace("$", "").replace("\\%", "%")
    s = _THOUSANDS_TEX.sub("", s)
    s = _THOUSANDS.sub("", s)
    s = " ".join(s.split())
    s = _unwrap(s)
    assignment = _ASSIGNMENT.match(s)
    if assignment:
        s = assignment.group(1).strip()
    s = re.sub(r"\s*(?:%|\\%|percent)$", "", s)
    unit = _NUMBER_THEN_WORDS.match(s) or _ATTACHED_UNIT.match(s)
    if unit:
        s = unit.group(1)
    s = _unwrap(s)
    paren = _PAREN_NUMBER.match(s)
    if paren:
        s = paren.group(1)
    if re.match(r"^[-+]\s+\d", s):  # "- 5" -> "-5"
        s = s[0] + s[1:].lstrip()
    if _SPACE_GROUPED.match(s):
        s = s.replace(" ", "")
    return s if len(s) <= max_chars else ""


def parse_number(s: str) -> Fraction | None:
    """The exact value of a plain number literal, or ``None``.

    Literals: integers, decimals (``2.50``, ``.5``), ``a/b`` and ``\\frac{a}{b}`` / ``\\frac12`` with
    integer parts, each with an optional sign; at most 60 digits in a row. Expressions (``1+1``,
    ``2^3``, ``\\sqrt{4}``), scientific notation and zero denominators are not plain numbers.

    Args:
        s: A normalised answer (:func:`normalize_answer`).
    """
    if not s or len(s) > 2 * _MAX_DIGITS or _DIGIT_RUN.search(s) or re.search(r"\d\s+\d", s):
        return None  # "7 2" is two numbers, not 72
    s = s.replace(" ", "")
    if _DECIMAL.match(s):
        return Fraction(s)
    m = _SLASH_FRAC.match(s)
    if m:
        num, den = int(m.group(1)), int(m.group(2))
        return Fraction(num, den) if den else None
    m = _TEX_FRAC.match(s)
    if m:
        num = int(m.group(2) or m.group(4))
        den = int(m.group(3) or m.group(5))
        if not den:
            return None
        value = Fraction(num, den)
        return -value if m.group(1) == "-" else value
    return None


def _exponents(s: str) -> list[str]:
    """The argument of each ``^`` (a braced group, one ``\\command``, a digit run or one character)."""
    found: list[str] = []
    i = s.find("^")
    while i >= 0:
        j = i + 1
        while j < len(s) and s[j] == " ":
            j += 1
        if j < len(s) and s[j] == "{":
            depth, k = 0, j
            while k < len(s):
                depth += {"{": 1, "}": -1}.get(s[k], 0)
                if depth == 0:
                    break
                k += 1
            found.append(s[j + 1 : k])
        else:
            m = re.match(r"\\[A-Za-z]+|\d+|.", s[j:], re.DOTALL)
            found.append(m.group() if m else "")
        i = s.find("^", i + 1)
    return found


def _brace_depth(s: str) -> int:
    depth = deepest = 0
    for ch in s:
        if ch == "{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch == "}":
            depth -= 1
    return deepest


def is_too_costly(s: str, closed_form: bool = False) -> bool:
    """Whether a normalised answer could make sympy run away; such answers are never verified.

    Big-integer arithmetic inside sympy runs in C while holding the GIL, so no timeout can interrupt
    it (``10^{10^{10}}`` hangs math-verify forever). Rejected: digit runs over 60 digits, ``**``,
    braces nested over 20 deep, powers (nested ones too) whose result could exceed
    :data:`~rlforge.rewards.powers.MAX_RESULT_BITS` bits (:func:`~rlforge.rewards.powers.result_bits`:
    ``2^{1000}`` and ``2^{2^{3}}`` pass, ``(((9^{200})^{200})^{200})^{200}`` does not), factorials in an
    exponent, factorials of anything but a literal up to 999 or a single letter, binomials/Gamma/factorials
    next to a power or a number over 999, and (when ``closed_form``) sums, products, integrals, limits and
    derivatives, which are not final answers.

    Args:
        s: A normalised answer.
        closed_form: Also reject non-closed-form constructs (applied to model answers, not targets).
    """
    if _DIGIT_RUN.search(s) or "**" in s or _brace_depth(s) > _MAX_BRACE_DEPTH:
        return True
    if closed_form and _CLOSED_FORM_BREAKERS.search(s):
        return True
    if _COMBINATORIAL.search(s):  # factorial-like: exact results grow super-exponentially, in C
        if "^" in s or re.search(r"\d{4}", s) or s.count("!") != len(_FACTORIAL_OK.findall(s)):
            return True
    for exponent in _exponents(s):
        if "!" in exponent or "\\binom" in exponent:
            return True
    return result_bits(s) > MAX_RESULT_BITS  # powers, nested too: bounded by the size of what they build
