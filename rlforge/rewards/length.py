"""``LengthPenalty``: a bounded penalty for over-long responses (DAPO's soft overlong punishment)."""

from __future__ import annotations

from rlforge.errors import ConfigError

__all__ = ["LengthPenalty"]


class LengthPenalty:
    """A penalty in ``[-coef, 0]`` that grows linearly as the response nears ``max_chars``.

    With ``L = len(response)`` (characters; rewards see text, not tokens) and ``s = max_chars -
    buffer_chars``::

        penalty = 0                                 if L <= s
                = -coef * (L - s) / buffer_chars    if s < L <= max_chars
                = -coef                             if L > max_chars

    ``buffer_chars=0`` gives a hard cliff: ``-coef`` for anything over ``max_chars``. Add it to a
    correctness reward with :class:`~rlforge.rewards.composite.CompositeReward` or the runner.

    Args:
        max_chars: Length above which the full penalty applies.
        buffer_chars: Width of the linear ramp below ``max_chars`` (0 <= buffer_chars <= max_chars).
        coef: Size of the full penalty (>= 0).
    """

    def __init__(self, max_chars: int, buffer_chars: int = 0, coef: float = 1.0) -> None:
        if max_chars < 1:
            raise ConfigError(f"LengthPenalty.max_chars={max_chars}; it must be >= 1.")
        if not 0 <= buffer_chars <= max_chars:
            raise ConfigError(f"LengthPenalty.buffer_chars={buffer_chars}; it must be in [0, max_chars={max_chars}].")
        if not coef >= 0:
            raise ConfigError(f"LengthPenalty.coef={coef}; it must be >= 0.")
        self.max_chars = max_chars
        self.buffer_chars = buffer_chars
        self.coef = float(coef)

    def __call__(self, prompt: str, response: str, target: str) -> float:
        """Penalty for one response (``prompt`` and ``target`` are unused).

        Args:
            prompt: Unused.
            response: The model's completion.
            target: Unused.
        """
        length = len(response)
        if length > self.max_chars:
            return -self.coef
        start = self.max_chars - self.buffer_chars
        if length <= start:
            return 0.0
        return -self.coef * (length - start) / self.buffer_chars
