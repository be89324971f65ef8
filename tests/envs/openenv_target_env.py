"""A small OpenEnv environment for the adapter's tests: guess the hidden digit.

``reset`` says "Say a number:"; the hidden digit is the last digit of the row's ``target`` when given, else
``seed % 10``. A turn whose text contains the digit gets reward 1 and ends the episode; otherwise the environment
says "Wrong, try again:" until ``tries`` turns are spent. ``app`` serves it (``uvicorn module:app``).
"""

from __future__ import annotations

import os
import time
from typing import Any

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State


class GuessAction(Action):
    text: str


class GuessObservation(Observation):
    prompt: str = ""
    success: bool = False


OPEN: set[int] = set()  # ids of the instances of this process not closed yet


class TargetEnvironment(Environment[GuessAction, GuessObservation, State]):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, tries: int = 2, init_delay_s: float = 0.0) -> None:
        super().__init__()
        time.sleep(init_delay_s)
        OPEN.add(id(self))
        self.tries = tries
        self._state = State()
        self.digit = "0"

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        target: Any = None,
        reset_delay_s: float = 0.0,
        **kwargs: Any,
    ) -> GuessObservation:
        time.sleep(reset_delay_s)
        self._state = State(episode_id=episode_id, step_count=0)
        self.digit = str(target)[-1] if target not in (None, "") else str((seed or 0) % 10)
        return GuessObservation(prompt="Say a number:")

    def step(self, action: GuessAction, timeout_s: float | None = None, **kwargs: Any) -> GuessObservation:
        self._state.step_count += 1
        hit = self.digit in action.text
        done = hit or self._state.step_count >= self.tries
        return GuessObservation(
            prompt="" if done else "Wrong, try again:",
            success=hit,
            reward=float(hit),
            done=done,
            metadata={"success": hit, "digit": self.digit},
        )

    def close(self) -> None:
        OPEN.discard(id(self))

    @property
    def state(self) -> State:
        return self._state


class GuessClient(EnvClient[GuessAction, GuessObservation, State]):
    """The environment's own typed client (what an OpenEnv environment package ships)."""

    def _step_payload(self, action: GuessAction) -> dict[str, Any]:
        return {"text": action.text}

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[GuessObservation]:
        obs = GuessObservation(**payload.get("observation", {}), reward=payload.get("reward"), done=payload["done"])
        return StepResult(observation=obs, reward=payload.get("reward"), done=payload.get("done", False))

    def _parse_state(self, payload: dict[str, Any]) -> State:
        return State(**payload)


app = create_app(
    TargetEnvironment,
    GuessAction,
    GuessObservation,
    max_concurrent_envs=int(os.environ.get("TARGET_ENV_MAX_SESSIONS", "32")),
)
