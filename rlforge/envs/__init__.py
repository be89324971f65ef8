"""Environments: multi-turn, tool-using episodes (``GRPOModule(environment=...)``).

``Environment`` is the protocol (Gymnasium-shaped, for text); ``LocalEnvRunner`` steps live episodes in
threads; ``run_episodes`` is the token-in/token-out episode loop the ``RolloutEngine`` and validation use.
"""

from rlforge.envs.base import Environment, Observation, StepResult, check_environment
from rlforge.envs.episodes import EnvRunner, group_seed, run_episodes
from rlforge.envs.openenv import OpenEnvEnvironment
from rlforge.envs.runner import LocalEnvRunner

__all__ = [
    "EnvRunner",
    "Environment",
    "LocalEnvRunner",
    "Observation",
    "OpenEnvEnvironment",
    "StepResult",
    "check_environment",
    "group_seed",
    "run_episodes",
]
