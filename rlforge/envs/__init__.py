"""Environments: multi-turn, tool-using episodes (``GRPOModule(environment=...)``).

``Environment`` is the protocol (Gymnasium-shaped, for text); ``LocalEnvRunner`` steps live episodes in
threads; ``run_episodes`` is the token-in/token-out episode loop the ``RolloutEngine`` and validation use.
``ToolEnvironment`` lets the model call Python tools (``Tool``, built-ins ``calculator`` and ``python``) in the
``HermesFormat`` (``<tool_call>`` / ``<tool_response>``).
"""

from rlforge.envs.base import Environment, Observation, StepResult, check_environment
from rlforge.envs.episodes import EnvRunner, episode_metrics, group_seed, run_episodes
from rlforge.envs.guess import GuessNumberEnvironment
from rlforge.envs.openenv import OpenEnvEnvironment
from rlforge.envs.runner import LocalEnvRunner
from rlforge.envs.tool_env import ToolEnvironment
from rlforge.envs.tool_formats import HermesFormat, ToolCall, ToolCallFormat
from rlforge.envs.tools import Tool, ToolError, calculator, python

__all__ = [
    "EnvRunner",
    "Environment",
    "GuessNumberEnvironment",
    "HermesFormat",
    "LocalEnvRunner",
    "Observation",
    "OpenEnvEnvironment",
    "StepResult",
    "Tool",
    "ToolCall",
    "ToolCallFormat",
    "ToolEnvironment",
    "ToolError",
    "calculator",
    "check_environment",
    "episode_metrics",
    "group_seed",
    "python",
    "run_episodes",
]
