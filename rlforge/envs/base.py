"""The environment protocol: Gymnasium-shaped, for text.

An episode is ``obs = env.reset(row, seed)`` then ``result = env.step(action_text)`` until ``result.done``
(or the environment's ``max_turns``). The configured instance is a *template*: the rollout makes one copy per
episode (``spawn()``, a deep copy by default) before ``reset``, so per-episode state simply lives on ``self``.
``reset`` and ``step`` may also be ``async def``.

What the model sees is token-in/token-out: the episode's token ids are the prompt, then each model turn as
sampled, then each observation's text tokenised on its own (never the whole history re-tokenised). Observation
tokens are masked out of the loss. See docs/DESIGN.md ("Multi-turn episodes").
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from rlforge.errors import ConfigError

REWARD_MODES = ("final", "sum")


@dataclass
class Observation:
    """What the environment says to the model.

    Attributes:
        text: Text appended to the context (the first prompt, on ``reset``).
        role: Who speaks (``user`` or ``tool``); used where the tokenizer has a chat template.
    """

    text: str
    role: str = "user"


@dataclass
class StepResult:
    """The outcome of one model turn.

    Attributes:
        observation: The environment's reply, appended before the next model turn (``None`` when done).
        reward: This turn's reward; the episode's reward is the last one or the sum (``Environment.reward_mode``).
        done: The episode is over.
        info: Free-form extras; ``success`` (bool) is the episode's ``val/accuracy`` when the environment gives it,
            ``tool_calls`` / ``tool_errors`` (int) are counted into ``rollout/tool_calls_mean`` /
            ``rollout/tool_errors_mean``.
    """

    observation: Observation | None = None
    reward: float = 0.0
    done: bool = False
    info: dict[str, Any] = field(default_factory=dict)


class Environment:
    """Base class of text environments (subclass it; override ``reset`` and ``step``).

    Args:
        max_turns: Model turns per episode; the episode ends after this many even if not ``done``.
        timeout_s: Time limit of one ``reset`` or ``step`` call; past it the episode ends with reward 0 and
            counts in ``env/errors`` (the run goes on).
        reward_mode: ``final`` (the last step's reward) or ``sum`` (every step's reward added).
    """

    def __init__(self, max_turns: int = 4, timeout_s: float = 30.0, reward_mode: str = "final") -> None:
        if max_turns < 1:
            raise ConfigError(f"module.environment.max_turns must be >= 1, got {max_turns}")
        if not timeout_s > 0:
            raise ConfigError(f"module.environment.timeout_s must be > 0, got {timeout_s}")
        if reward_mode not in REWARD_MODES:
            raise ConfigError(f"module.environment.reward_mode must be 'final' or 'sum', got {reward_mode!r}")
        self.max_turns, self.timeout_s, self.reward_mode = max_turns, timeout_s, reward_mode

    def spawn(self) -> Environment:
        """A fresh copy for one episode (override when the template holds what cannot be deep-copied)."""
        return copy.deepcopy(self)

    def reset(self, row: dict[str, Any], seed: int) -> Observation:
        """Starts an episode for dataset ``row``; ``seed`` is the same for the episodes of one group."""
        raise NotImplementedError(f"{type(self).__name__}.reset")

    def step(self, action: str) -> StepResult:
        """Applies the model's turn ``action`` (its decoded text) and returns what follows."""
        raise NotImplementedError(f"{type(self).__name__}.step")

    def close(self) -> None:
        """Releases the episode's resources (connections, processes); called once per episode."""


def check_environment(env: Any, where: str = "module.environment") -> Environment:
    """``env`` when it is an ``Environment``; a one-line ``ConfigError`` naming ``where`` otherwise."""
    if not isinstance(env, Environment):
        raise ConfigError(
            f"{where} must be an rlforge.envs.Environment (subclass it and override reset/step), "
            f"got {type(env).__name__}"
        )
    return env
