"""Environments: multi-turn, tool-using episodes (``GRPOModule(environment=...)``).

``Environment`` is the protocol (Gymnasium-shaped, for text); ``LocalEnvRunner`` steps live episodes in
threads; ``run_episodes`` is the token-in/token-out episode loop the ``RolloutEngine`` and validation use.
"""

from rlforge.envs.base import Environment, Observation, StepResult, check_environment
from rlforge.envs.episodes import EnvRunner, episode_metrics, group_seed, run_episodes
from rlforge.envs.runner import LocalEnvRunner

__all__ = [
    "EnvRunner",
    "Environment",
    "LocalEnvRunner",
    "Observation",
    "StepResult",
    "check_environment",
    "episode_metrics",
    "group_seed",
    "run_episodes",
]
