"""Progress counters: resume is exact because progress is counted, not inferred."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass
class Progress:
    """What the trainer has done so far.

    Attributes:
        steps: Completed RL steps (rollout + update + sync); equals the policy version.
        rollouts: Completed rollout phases.
        optimizer_steps: Optimizer steps taken (one per minibatch per PPO epoch).
        skipped_steps: Optimizer steps skipped because the loss or gradient was not finite.
        samples: Completions trained on.
        tokens: Response tokens trained on.
    """

    steps: int = 0
    rollouts: int = 0
    optimizer_steps: int = 0
    skipped_steps: int = 0
    samples: int = 0
    tokens: int = 0

    def state_dict(self) -> dict[str, Any]:
        return asdict(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key, value in state.items():
            setattr(self, key, int(value))
