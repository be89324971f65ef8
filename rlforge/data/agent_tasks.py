"""Built-in agentic tasks: rows for multi-turn environments (``rlforge.envs``).

Like the single-turn tasks in ``rlforge.data.tasks`` they are pure functions of their name, seed and
arguments (a private ``random.Random(seed)``), with fixed, disjoint train and held-out splits. Their rows
have the same keys (``prompt``, ``target``, ``solution``); the episode is played by an environment:

- ``tool_multiply``: ``"Q: What is 347 * 23?\\nA:"`` -> ``"7981"``, too hard for a tiny model to compute,
  easy with ``rlforge.envs.ToolEnvironment(tools=[rlforge.envs.tools.calculator])``: call the calculator,
  read its ``<tool_response>``, answer ``#### 7981``. Disjoint in the ``(a, b)`` operand pairs.
- ``guess_number``: every prompt is the same question; the row's ``target`` is the hidden number, played by
  ``rlforge.envs.guess.GuessNumberEnvironment`` (it answers each guess with higher/lower). Disjoint in the
  hidden numbers, so the held-out numbers were never the answer of a training episode.

>>> from rlforge.data.tasks import make_task
>>> make_task("tool_multiply").val[0]["prompt"]
'Q: What is 686 * 72?\\nA:'
"""

from __future__ import annotations

import itertools

from rlforge.errors import ConfigError

__all__ = ["AGENT_TASKS", "GUESS_PROMPT", "guess_number", "tool_multiply"]

GUESS_PROMPT = "Q: Guess my number from {low} to {high}.\nA:"
"""Prompt of ``guess_number`` (the same for every row: the number is hidden)."""


def tool_multiply(seed: int = 0, num_val: int = 200, num_train: int | None = None) -> TaskSplits:
    """Three-digit times two-digit multiplication: ``"Q: What is 347 * 23?\\nA:"`` -> ``" #### 7981"``.

    Args:
        seed: Seed of the split; the held-out pairs depend only on it and the arguments.
        num_val: Number of held-out ``(a, b)`` pairs (out of 81000).
        num_train: Cap on the number of train rows; ``None`` keeps all the others.
    """
    pairs = list(itertools.product(range(100, 1000), range(10, 100)))
    train, val = _split(pairs, seed, num_val, num_train, "num_val")
    rows = lambda ps: [_row(f"Q: What is {a} * {b}?\nA:", str(a * b)) for a, b in ps]
    return TaskSplits(train=rows(train), val=rows(val), name="tool_multiply")


def guess_number(seed: int = 0, high: int = 50, num_val: int = 20) -> TaskSplits:
    """Guess a hidden number in ``1..high``: the row's ``target`` is the number, the prompt never says it.

    Args:
        seed: Seed of the split of the numbers into train and held-out.
        high: Largest possible number (the range is ``1..high``).
        num_val: How many of the numbers are held out.
    """
    if high < 2:
        raise ConfigError(f"`high` must be at least 2, got {high}.")
    train, val = _split([(n,) for n in range(1, high + 1)], seed, num_val, None, "num_val")
    prompt = GUESS_PROMPT.format(low=1, high=high)
    rows = lambda ns: [_row(prompt, str(n)) for (n,) in ns]
    return TaskSplits(train=rows(train), val=rows(val), name="guess_number")


AGENT_TASKS = {"tool_multiply": tool_multiply, "guess_number": guess_number}
"""The agentic tasks, by registry name (part of ``rlforge.data.tasks.TASKS``)."""

# Imported last, after AGENT_TASKS: ``rlforge.data.tasks`` imports that while it loads (circular on purpose).
from rlforge.data.tasks import TaskSplits, _row, _split  # noqa: E402
