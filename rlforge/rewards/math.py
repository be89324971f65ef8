"""``MathReward``: 1.0 when the response's final answer equals the target, else 0.0 (no partial credit)."""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Sequence
from fractions import Fraction
from typing import Any, NamedTuple

from rlforge.errors import ConfigError
from rlforge.rewards._deadline import DeadlineExceeded, call_with_deadline
from rlforge.rewards.extract import EXTRACTORS, strip_thinking
from rlforge.rewards.normalize import is_too_costly, normalize_answer, parse_number
from rlforge.rewards.powers import parse_power

__all__ = ["MathReward"]

log = logging.getLogger(__name__)

_MAX_DISTINCT_ANSWERS = 4


class _Gold(NamedTuple):
    text: str
    number: Fraction | None
    costly: bool


def _exact_number(text: str) -> Fraction | None:
    """A plain number literal, or a number written as a small power (``2^{10}``, ``3 \\times 10^{5}``)."""
    value = parse_number(text)
    return value if value is not None else parse_power(text)


@functools.lru_cache(maxsize=4096)
def _prepare_target(target: str, max_chars: int) -> _Gold:
    text = normalize_answer(target, max_chars=max(max_chars, len(target)))
    number = _exact_number(text)
    return _Gold(text, number, number is None and is_too_costly(text, closed_form=False))


_warm_lock = threading.Lock()
_warm = False


def _drop_timeout_notice(record: logging.LogRecord) -> bool:
    # math-verify's signal timeouts are off on purpose (call_with_deadline bounds the time); its warning that
    # they are off is addressed to us, not to the user.
    return not record.getMessage().startswith("Timeout is disabled")


for _name in ("math_verify.grader", "math_verify.parser"):
    logging.getLogger(_name).addFilter(_drop_timeout_notice)


def _warm_up() -> None:
    """Import math-verify and run it once outside any time limit (lazy parser set-up must not be cut)."""
    global _warm
    if _warm:
        return
    with _warm_lock:
        if not _warm:
            from math_verify import verify

            verify(_mv_parse("1"), _mv_parse("x+1"), timeout_seconds=None)
            _warm = True


@functools.lru_cache(maxsize=4096)
def _mv_parse(latex: str) -> list[Any]:
    from math_verify import LatexExtractionConfig, parse

    # LaTeX extraction only: math-verify's ExprExtractionConfig parses with sympy's parse_expr, which
    # uses Python eval; latex2sympy builds sympy objects from a grammar and never evaluates text.
    # Signal-based timeouts off (they only work in the main thread); call_with_deadline bounds time.
    return parse(f"${latex}$", extraction_config=[LatexExtractionConfig()], parsing_timeout=None)


@functools.lru_cache(maxsize=8192)
def _verify_cached(answer: str, gold: str, timeout_s: float) -> bool:
    """math-verify's verdict under a time limit; cached, as a group repeats answers and targets.

    A timeout leaves as :class:`DeadlineExceeded`, which ``lru_cache`` does not store: a comparison cut
    short by a busy machine must not fix a 0 for that answer for the rest of the run.
    """
    from math_verify import verify

    def compare() -> bool:
        parsed_gold, parsed_answer = _mv_parse(gold), _mv_parse(answer)
        return bool(parsed_gold and parsed_answer and verify(parsed_gold, parsed_answer, timeout_seconds=None))

    try:
        return call_with_deadline(compare, timeout_s)
    except Exception as err:  # math-verify/sympy internals; a malformed answer is simply wrong
        log.debug("math-verify failed on %r vs %r: %r", answer, gold, err)
        return False


class MathReward:
    """1.0 if the final answer in the response equals the target, else 0.0 (or ``format_bonus``).

    Pipeline: drop an echoed prompt (a response that starts with the prompt) and, with
    ``strip_thinking``, everything up to the last ``</think>`` (a response whose thinking never closes,
    opened in the response or at the end of the prompt, has no answer) -> the first extractor in
    ``extractors`` that finds a non-empty answer wins -> normalise both sides
    (:func:`~rlforge.rewards.normalize.normalize_answer`) -> compare.

    Several answers in one format: for ``boxed`` and ``answer_is`` the last one is the final answer
    (models box intermediate results and correct themselves in prose); for the formats listed in
    ``unique_answer_formats`` (default ``hash`` and ``answer_tag``, which are final-answer markers)
    every occurrence must be correct, so hedging (``#### 3`` then ``#### 4``) scores 0. Repeating the
    same answer is fine.

    Comparison: identical normalised text is correct. If the target is a plain number (``72``,
    ``-2.5``, ``3/4``, ``\\frac{3}{4}``), the answer must be a plain number too and is compared exactly
    as a fraction (``\\frac{1}{2}`` == ``0.5`` == ``1/2``, ``2.50`` == ``2.5``); expressions such as
    ``1+1`` for target ``2`` are not answers and score 0. The one evaluated form is a number written as a
    power (``2^{10}`` == ``1024``, ``3 \\times 10^{5}`` == ``300000``; see
    :func:`~rlforge.rewards.powers.parse_power`), computed exactly once its size is known to be small.
    Otherwise the target is symbolic and ``math-verify`` decides (LaTeX parsing only; symbolic
    equivalence such as ``\\sqrt{12}`` == ``2\\sqrt{3}``). Answers that could make sympy run away
    (powers, nested or not, whose result would be too large; huge literals, deep nesting; sums,
    integrals and limits, which are not final answers) are
    rejected before math-verify sees them. Percent signs are dropped: ``50%`` == ``50`` != ``0.5``.

    Time: math-verify's own timeouts use ``signal.alarm``, which only works in the main thread, so they
    are always off (``parsing_timeout=None``, ``timeout_seconds=None``); instead each comparison runs
    under a per-thread profiler deadline (``math_verify_timeout_s``, any thread) that stops sympy at
    its next function call, and inputs whose cost is in single C calls (big-integer powers) are
    rejected up front. Slow comparisons score 0; they are the answer's fault, not an error.

    Args:
        extractors: Answer formats to try, in order: ``boxed``, ``hash``, ``answer_tag``, ``answer_is``.
        unique_answer_formats: Formats in which several different answers (hedging) score 0.
        format_bonus: Reward for a well-formed but wrong answer (one distinct extracted answer);
            0 unless configured. Must be in [0, 1).
        strip_thinking: Only read the answer after the last ``</think>``.
        max_answer_chars: Longest normalised answer considered; longer ones score 0.
        math_verify_timeout_s: Time limit of one math-verify comparison; a slower one scores 0.
    """

    def __init__(
        self,
        extractors: Sequence[str] = ("boxed", "hash", "answer_tag", "answer_is"),
        unique_answer_formats: Sequence[str] = ("hash", "answer_tag"),
        format_bonus: float = 0.0,
        strip_thinking: bool = True,
        max_answer_chars: int = 200,
        math_verify_timeout_s: float = 1.0,
    ) -> None:
        self.extractors = list(extractors)
        self.unique_answer_formats = list(unique_answer_formats)
        fields = (("extractors", self.extractors), ("unique_answer_formats", self.unique_answer_formats))
        for field, names in fields:
            unknown = [n for n in names if n not in EXTRACTORS]
            if unknown:
                raise ConfigError(f"MathReward.{field}: unknown format(s) {unknown}; choose from {sorted(EXTRACTORS)}.")
        if not self.extractors:
            raise ConfigError(f"MathReward.extractors is empty; list at least one of {sorted(EXTRACTORS)}.")
        if not 0.0 <= format_bonus < 1.0:
            raise ConfigError(f"MathReward.format_bonus={format_bonus}; it must be in [0, 1).")
        if max_answer_chars < 1:
            raise ConfigError(f"MathReward.max_answer_chars={max_answer_chars}; it must be >= 1.")
        if not math_verify_timeout_s > 0:
            raise ConfigError(f"MathReward.math_verify_timeout_s={math_verify_timeout_s}; it must be > 0.")
        self.format_bonus = float(format_bonus)
        self.strip_thinking = strip_thinking
        self.max_answer_chars = max_answer_chars
        self.math_verify_timeout_s = float(math_verify_timeout_s)

    def extract(self, response: str) -> tuple[str, list[str]]:
        """The first format (in ``extractors`` order) with a non-empty answer, and all its answers.

        Returns ``("", [])`` when no format matches. Answers are raw (not normalised).

        Args:
            response: The text to search (after prompt/thinking removal).
        """
        for name in self.extractors:
            answers = [a for a in EXTRACTORS[name](response) if a.strip()]
            if answers:
                return name, answers
        return "", []

    def __call__(self, prompt: str, response: str, target: str) -> float:
        """Score one response.

        Args:
            prompt: The prompt (only used to drop an echo of it at the start of ``response``).
            response: The model's completion.
            target: The reference answer.
        """
        if prompt and response.startswith(prompt):
            response = response[len(prompt) :]
        if self.strip_thinking:
            response = strip_thinking(response, opened_in_prompt=prompt.rstrip().endswith("<think>"))
        fmt, raw = self.extract(response)
        if not raw:
            return 0.0
        if fmt in self.unique_answer_formats:
            candidates = list(dict.fromkeys(normalize_answer(a, self.max_answer_chars) for a in raw))
            if len(candidates) > _MAX_DISTINCT_ANSWERS:
                return 0.0
        else:
            candidates = [normalize_answer(raw[-1], self.max_answer_chars)]
        if "" in candidates:
            return 0.0  # empty or over-long answer
        gold = _prepare_target(target, self.max_answer_chars)
        if gold.text and all(self._equivalent(c, gold) for c in candidates):
            return 1.0
        return self.format_bonus if len(candidates) == 1 else 0.0

    def _equivalent(self, answer: str, gold: _Gold) -> bool:
        if answer == gold.text:
            return True
        if gold.number is not None:
            value = _exact_number(answer)
            return value is not None and value == gold.number
        if gold.costly or is_too_costly(answer, closed_form=True):
            return False
        return self._math_verify(answer, gold.text)

    def _math_verify(self, answer: str, gold: str) -> bool:
        _warm_up()
        try:
            return _verify_cached(answer, gold, self.math_verify_timeout_s)
        except DeadlineExceeded:  # scored 0 this once, not cached
            log.debug("math-verify over %ss on %r vs %r; scored 0", self.math_verify_timeout_s, answer, gold)
            return False
