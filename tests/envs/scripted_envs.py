"""Small environments for the episode-loop tests (importable by path from YAML and by subprocesses)."""

from __future__ import annotations

import asyncio
import random
import time

from rlforge.envs import Environment, Observation, StepResult


class CountdownEnv(Environment):
    """Each turn replies with a seeded random hint; done after ``turns`` turns; reward = odd length of the last turn."""

    def __init__(self, turns: int = 2, **kwargs) -> None:
        super().__init__(**kwargs)
        self.turns = turns

    def reset(self, row, seed):
        self.rng, self.left = random.Random(seed), self.turns
        return Observation(row["prompt"])

    def step(self, action):
        self.left -= 1
        if self.left <= 0:
            return StepResult(reward=float(len(action) % 2), done=True, info={"tool_calls": 1})
        return StepResult(Observation(f" hint {self.rng.randint(0, 99)}:"), info={"tool_calls": 1})


class AsyncCountdownEnv(CountdownEnv):
    """``CountdownEnv`` with ``async def`` reset/step."""

    async def reset(self, row, seed):
        await asyncio.sleep(0)
        return CountdownEnv.reset(self, row, seed)

    async def step(self, action):
        await asyncio.sleep(0)
        return CountdownEnv.step(self, action)


class FaultyEnv(CountdownEnv):
    """Misbehaves on chosen episodes: by the first digit of the row's target (1 raises, 2 hangs, 3 returns garbage)."""

    def reset(self, row, seed):
        self.fault = str(row.get("target", "0"))[0]
        return super().reset(row, seed)

    def step(self, action):
        if self.fault == "1":
            raise RuntimeError("boom")
        if self.fault == "2":
            time.sleep(self.timeout_s * 20)
        if self.fault == "3":
            return {"reward": 1.0}
        return super().step(action)
