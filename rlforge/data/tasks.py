"""Built-in synthetic tasks in GSM8K answer format (``... #### <answer>``).

Every task is a pure function of its name, seed and keyword arguments: it uses its own
``random.Random(seed)`` and never the global RNG, so the held-out split is fixed. The train and
validation splits are disjoint in the content that determines the answer (the operand pairs for
``addition``, the digit strings for ``reverse`` and ``max``).

Within a task every prompt has the same number of digits, so with a digit-splitting tokenizer all
prompts of a task tokenise to the same length (no padding is needed in a batch). The default task is
two-digit addition; the shipped default policy (``rlforge/models/assets/default_policy``) is warm-started on it:

>>> splits = make_task("addition")
>>> splits.val[0]["prompt"], splits.val[0]["solution"], splits.val[0]["target"]
('Q: What is 25 + 60?\\nA:', ' #### 85', '85')
"""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from rlforge.errors import ConfigError

__all__ = ["TASKS", "TaskSplits", "extract_answer", "make_task"]

ANSWER_MARKER = "####"
_ANSWER_RE = re.compile(r"####\s*(-?[0-9][0-9,]*(?:\.[0-9]+)?)")


@dataclass
class TaskSplits:
    """The two splits of a synthetic task.

    Args:
        train: Rows ``{"prompt", "target", "solution"}`` used for RL prompts and supervised warm start.
        val: Held-out rows with the same keys; fixed for a given task name, seed and arguments.
        name: The task's registry name.
    """

    train: list[dict[str, str]]
    val: list[dict[str, str]]
    name: str = field(default="")


def extract_answer(text: str) -> str | None:
    """Return the number after the first ``####`` in ``text`` (commas removed), or ``None``.

    Args:
        text: A model response such as ``" #### 8"``.
    """
    match = _ANSWER_RE.search(text)
    return match.group(1).replace(",", "") if match else None


def _row(prompt: str, answer: str) -> dict[str, str]:
    return {"prompt": prompt, "target": answer, "solution": f" {ANSWER_MARKER} {answer}"}


def _split(
    items: Sequence[tuple[int, ...]], seed: int, num_val: int, num_train: int | None, field_name: str
) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    """Shuffle ``items`` with a private RNG and cut them into (train, val); any prefix of val is random."""
    if not 0 < num_val < len(items):
        raise ConfigError(f"`{field_name}` must be between 1 and {len(items) - 1} for this task, got {num_val}.")
    order = list(items)
    random.Random(seed).shuffle(order)
    val, train = order[:num_val], order[num_val:]
    if num_train is not None:
        if num_train < 1:
            raise ConfigError(f"`num_train` must be positive or None, got {num_train}.")
        train = train[:num_train]
    return train, val


def addition(seed: int = 0, num_val: int | None = None, digits: int = 2) -> TaskSplits:
    """Addition of two ``digits``-digit numbers: ``"Q: What is 47 + 85?\\nA:"`` -> ``" #### 132"``.

    With ``digits=2`` (the default) the operands are 10-99 (8100 pairs), so every prompt has the same
    length and the held-out pairs can only be solved by learning digit-wise addition. ``digits=1`` gives
    single-digit operands 0-9 (100 pairs); there a disjoint held-out split is only reachable through
    commutativity (``b + a`` seen in train), so RL on it barely moves held-out accuracy.

    Args:
        seed: Seed of the split; the held-out pairs depend only on it and the arguments.
        num_val: Number of held-out ``(a, b)`` pairs; default 200 (30 for ``digits=1``).
        digits: Number of digits of each operand (1 or 2).
    """
    if digits not in (1, 2):
        raise ConfigError(f"`digits` must be 1 or 2, got {digits}.")
    low = 0 if digits == 1 else 10 ** (digits - 1)
    pairs = list(itertools.product(range(low, 10**digits), repeat=2))
    num_val = (30 if digits == 1 else 200) if num_val is None else num_val
    train, val = _split(pairs, seed, num_val, None, "num_val")
    rows = lambda ps: [_row(f"Q: What is {a} + {b}?\nA:", str(a + b)) for a, b in ps]
    return TaskSplits(train=rows(train), val=rows(val), name="addition")


def reverse(seed: int = 0, num_val: int = 200, num_train: int | None = None) -> TaskSplits:
    """Reverse four digits (1-9, so no answer has a leading zero): ``"Q: Reverse 4821.\\nA:"`` -> ``" #### 1284"``.

    Args:
        seed: Seed of the split.
        num_val: Number of held-out digit strings (out of 6561).
        num_train: Cap on the number of train rows; ``None`` keeps all the others.
    """
    strings = list(itertools.product(range(1, 10), repeat=4))
    train, val = _split(strings, seed, num_val, num_train, "num_val")
    rows = lambda ds: [_row(f"Q: Reverse {''.join(map(str, d))}.\nA:", "".join(map(str, reversed(d)))) for d in ds]
    return TaskSplits(train=rows(train), val=rows(val), name="reverse")


def maximum(seed: int = 0, num_val: int = 200, num_train: int | None = None) -> TaskSplits:
    """Largest of four digits: ``"Q: What is the max of 3 7 1 5?\\nA:"`` -> ``" #### 7"``.

    Args:
        seed: Seed of the split.
        num_val: Number of held-out digit tuples (out of 10000).
        num_train: Cap on the number of train rows; ``None`` keeps all the others.
    """
    tuples = list(itertools.product(range(10), repeat=4))
    train, val = _split(tuples, seed, num_val, num_train, "num_val")
    rows = lambda ds: [_row(f"Q: What is the max of {' '.join(map(str, d))}?\nA:", str(max(d))) for d in ds]
    return TaskSplits(train=rows(train), val=rows(val), name="max")


# Imported here, after the helpers it uses are defined (it imports them from this module).
from rlforge.data.agent_tasks import AGENT_TASKS  # noqa: E402

TASKS: dict[str, Callable[..., TaskSplits]] = {"addition": addition, "reverse": reverse, "max": maximum, **AGENT_TASKS}
"""Registry of built-in tasks: name -> builder ``(seed=0, **kwargs) -> TaskSplits``; the agentic ones
(``tool_multiply``, ``guess_number``) are in ``rlforge.data.agent_tasks``."""


def make_task(name: str = "addition", seed: int = 0, **kwargs: int | None) -> TaskSplits:
    """Build the train and held-out splits of a built-in task.

    Args:
        name: One of ``TASKS`` (``addition``, ``reverse``, ``max``, ``tool_multiply``, ``guess_number``).
        seed: Seed of the train/val split (private RNG; the global RNG is untouched).
        **kwargs: Task-specific arguments, e.g. ``num_val``.

    Raises:
        ConfigError: If the name is unknown or an argument is invalid.
    """
    if name not in TASKS:
        raise ConfigError(f"Unknown task {name!r} for `task`; valid names: {', '.join(sorted(TASKS))}.")
    try:
        return TASKS[name](seed=seed, **kwargs)
    except TypeError as err:
        raise ConfigError(f"Invalid arguments for task {name!r}: {err}") from err
