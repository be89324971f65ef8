"""``GuessNumberEnvironment``: a multi-turn game where the model must use the environment's feedback.

The row's ``target`` is a hidden number in ``low..high`` (the ``guess_number`` task). Each model turn is a
guess, a bare integer such as ``" 25"``; the environment replies ``" higher\\n"`` or ``" lower\\n"`` (the
hidden number is higher or lower than the guess), or ``" not a number\\n"`` when the turn holds no integer.
A correct guess ends the episode with reward 1 and ``success``; ``max_turns`` guesses without it end the
episode with reward 0. Bisection finds any number of ``1..50`` in 6 guesses; ignoring the feedback does not.
"""

from __future__ import annotations

import re
from typing import Any

from rlforge.envs.base import Environment, Observation, StepResult
from rlforge.errors import ConfigError, DataError

__all__ = ["HIGHER", "INVALID", "LOWER", "GuessNumberEnvironment", "parse_guess"]

HIGHER = " higher\n"
LOWER = " lower\n"
INVALID = " not a number\n"

_GUESS_RE = re.compile(r"^\s*(-?\d{1,9})\s*\.?\s*$")


def parse_guess(action: str) -> int | None:
    """The integer a turn guesses (the whole turn, e.g. ``" 25"``), or ``None`` when it is not one integer."""
    match = _GUESS_RE.match(action)
    return int(match.group(1)) if match else None


class GuessNumberEnvironment(Environment):
    """Guess the row's hidden ``target`` in ``low..high`` with higher/lower feedback after each guess.

    Args:
        low: Smallest possible number.
        high: Largest possible number.
        max_turns: Guesses per episode.
        timeout_s: Time limit of one call (see ``Environment``).
        reward_mode: ``final`` or ``sum`` (every turn but a correct guess is rewarded 0, so both agree).
    """

    def __init__(
        self, low: int = 1, high: int = 50, max_turns: int = 6, timeout_s: float = 30.0, reward_mode: str = "final"
    ) -> None:
        super().__init__(max_turns=max_turns, timeout_s=timeout_s, reward_mode=reward_mode)
        if low > high:
            raise ConfigError(f"module.environment.low ({low}) must be <= module.environment.high ({high})")
        self.low, self.high = low, high
        self.target, self.turns = low, 0

    def reset(self, row: dict[str, Any], seed: int) -> Observation:
        """Hides ``row["target"]`` (an integer in ``low..high``) and shows ``row["prompt"]``."""
        try:
            target = int(str(row["target"]).strip())
        except (KeyError, ValueError) as err:
            raise DataError(f"guess_number row needs an integer `target`, got {row.get('target')!r}") from err
        if not self.low <= target <= self.high:
            raise DataError(f"guess_number row target {target} is outside low..high = {self.low}..{self.high}")
        self.target, self.turns = target, 0
        return Observation(str(row["prompt"]))

    def step(self, action: str) -> StepResult:
        """Scores one guess: correct -> reward 1, done; else the higher/lower hint (done after ``max_turns``)."""
        self.turns += 1
        guess = parse_guess(action)
        if guess == self.target:
            return StepResult(reward=1.0, done=True, info={"success": True, "turns": self.turns})
        if self.turns >= self.max_turns:
            return StepResult(reward=0.0, done=True, info={"success": False, "turns": self.turns})
        text = INVALID if guess is None else HIGHER if self.target > guess else LOWER
        return StepResult(observation=Observation(text), reward=0.0, info={"valid": guess is not None})
