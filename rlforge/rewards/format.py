"""``FormatReward``: a fixed reward when the response matches a regular expression."""

from __future__ import annotations

from collections.abc import Sequence

import regex

from rlforge.errors import ConfigError

__all__ = ["FormatReward"]

_FLAGS = {
    "IGNORECASE": regex.IGNORECASE,
    "MULTILINE": regex.MULTILINE,
    "DOTALL": regex.DOTALL,
    "VERBOSE": regex.VERBOSE,
    "ASCII": regex.ASCII,
}


class FormatReward:
    """``reward`` if the response matches ``pattern`` (searched anywhere, or the whole text), else 0.0.

    Patterns use the ``regex`` package (a superset of ``re`` syntax) because its matcher takes a time
    limit: a catastrophic-backtracking pattern on adversarial output gives up after ``timeout_s`` and
    scores 0, instead of hanging while holding the GIL as ``re`` would.

    Args:
        pattern: Regular expression, e.g. ``"^<think>.+?</think>\\s*\\S"``.
        reward: Score when the pattern matches.
        fullmatch: Require the whole response to match (default: search anywhere).
        flags: Names of regex flags: IGNORECASE, MULTILINE, DOTALL, VERBOSE, ASCII.
        timeout_s: Longest time one match may take; a slower match scores 0.
    """

    def __init__(
        self,
        pattern: str,
        reward: float = 1.0,
        fullmatch: bool = False,
        flags: Sequence[str] = ("DOTALL",),
        timeout_s: float = 0.5,
    ) -> None:
        unknown = [f for f in flags if f.upper() not in _FLAGS]
        if unknown:
            raise ConfigError(f"FormatReward.flags: unknown flag(s) {unknown}; choose from {sorted(_FLAGS)}.")
        if timeout_s <= 0:
            raise ConfigError(f"FormatReward.timeout_s={timeout_s}; it must be > 0.")
        bits = 0
        for f in flags:
            bits |= _FLAGS[f.upper()]
        try:
            self._regex = regex.compile(pattern, bits)
        except (regex.error, TypeError, ValueError, OverflowError) as err:
            raise ConfigError(f"FormatReward.pattern {pattern!r} is not a valid regular expression: {err}") from err
        self.pattern = pattern
        self.reward = float(reward)
        self.fullmatch = fullmatch
        self.timeout_s = float(timeout_s)

    def __call__(self, prompt: str, response: str, target: str) -> float:
        """Score one response (``prompt`` and ``target`` are unused).

        Args:
            prompt: Unused.
            response: The model's completion.
            target: Unused.
        """
        match = self._regex.fullmatch if self.fullmatch else self._regex.search
        try:
            found = match(response, timeout=self.timeout_s)
        except TimeoutError:
            return 0.0
        return self.reward if found is not None else 0.0
