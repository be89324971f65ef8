"""Prompt length limits: every prompt must leave room for the response in the model's positions.

A prompt longer than ``max_position_embeddings - max_new_tokens`` cannot be generated from (the
positions run out; a 1 MB prompt makes generation run for hours). The data modules check every prompt
once, before the first rollout, against the tighter of that bound and ``data.max_prompt_tokens``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

__all__ = ["CHARS_PER_TOKEN_BOUND", "OVERLONG_CHOICES", "model_prompt_limit", "prompt_length", "quiet_tokenizer"]

OVERLONG_CHOICES = ("error", "skip")
"""Valid ``data.overlong_prompts`` values."""

CHARS_PER_TOKEN_BOUND = 64
"""No tokenizer averages more characters per token on real text: a prompt longer than this many
characters per allowed token is over the limit without being tokenized (which takes seconds per MB)."""


def model_prompt_limit(module: Any) -> tuple[int | None, str]:
    """The longest prompt ``module``'s policy can answer, and why: positions minus the longest response.

    Returns ``(None, "")`` when the policy's config has no ``max_position_embeddings``.

    Args:
        module: A configured ``RLModule`` (its ``policy.config``, ``sampling`` and ``val_sampling`` are read).
    """
    positions = getattr(getattr(module.policy, "config", None), "max_position_embeddings", None)
    if not isinstance(positions, int):
        return None, ""
    new_tokens = module.val_sampling.max_new_tokens
    if not module.supervised:  # SFT never samples with `sampling`
        new_tokens = max(new_tokens, module.sampling.max_new_tokens)
    reason = f"the model's max_position_embeddings {positions} minus max_new_tokens {new_tokens}"
    return max(positions - new_tokens, 0), reason


def prompt_length(prompt: str, encode: Callable[[str], Sequence[int]], limit: int) -> tuple[int, str]:
    """``(length, unit)`` of ``prompt``: its token count, or its character count when that alone is over ``limit``."""
    if len(prompt) > CHARS_PER_TOKEN_BOUND * max(limit, 1):
        return len(prompt), "characters"
    return len(encode(prompt)), "tokens"


@contextmanager
def quiet_tokenizer() -> Iterator[None]:
    """Silences transformers' "sequence length is longer than ..." warning while lengths are checked here."""
    logger = logging.getLogger("transformers")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)
