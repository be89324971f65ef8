"""Background sampling: ``submit`` returns a ``Pending`` whose ``result()`` is the completions."""

from __future__ import annotations

from typing import Any, Protocol

from rlforge.generation.params import SamplingParams
from rlforge.types import Completion


class Pending(Protocol):
    """A submitted ``generate`` call."""

    def result(self) -> list[list[Completion]]:
        """Waits for and returns the completions (one list per prompt)."""
        ...


class Done:
    """A ``Pending`` that already holds its result (generators that sample in the caller's thread)."""

    def __init__(self, value: list[list[Completion]]) -> None:
        self._value = value

    def result(self) -> list[list[Completion]]:
        return self._value


def submit(generator: Any, prompt_ids: list[list[int]], params: SamplingParams) -> Pending:
    """Starts sampling: in the background when ``generator`` has ``submit``, else now, in this thread.

    A generator without ``submit`` samples with the weights it holds at submission, which is exactly what a
    background generator does with requests queued before a weight update: both give the same completions.
    """
    start = getattr(generator, "submit", None)
    return start(prompt_ids, params) if callable(start) else Done(generator.generate(prompt_ids, params))
