"""``ThinkingReward``: rewards exactly one well-formed, non-empty reasoning block before the answer."""

from __future__ import annotations

from rlforge.errors import ConfigError

__all__ = ["ThinkingReward"]


class ThinkingReward:
    """``reward`` for exactly one non-empty ``<think>...</think>`` block followed by a non-empty answer.

    A response scores ``reward`` only if all hold (else 0.0):

    - it starts with the open tag (only whitespace before it), or the prompt ends with the open tag
      (chat templates such as Qwen3's open the block in the generation prompt); then the response
      must not open another one;
    - there is exactly one open and one close tag, in that order (unclosed, stray closing, nested or
      repeated blocks score 0);
    - the block holds non-whitespace text;
    - some non-whitespace text (the answer) follows the close tag.

    Args:
        open_tag: Tag that opens the reasoning block.
        close_tag: Tag that closes it.
        reward: Score of a well-formed response.
    """

    def __init__(self, open_tag: str = "<think>", close_tag: str = "</think>", reward: float = 1.0) -> None:
        if not open_tag or not close_tag or open_tag == close_tag:
            raise ConfigError(
                f"ThinkingReward: open_tag={open_tag!r} and close_tag={close_tag!r} must be non-empty and differ."
            )
        self.open_tag = open_tag
        self.close_tag = close_tag
        self.reward = float(reward)

    def __call__(self, prompt: str, response: str, target: str) -> float:
        """Score one response (``target`` is unused).

        Args:
            prompt: The prompt; an open tag at its end counts as the start of the block.
            response: The model's completion.
            target: Unused.
        """
        n_open = response.count(self.open_tag)
        if response.count(self.close_tag) != 1:
            return 0.0
        if prompt.rstrip().endswith(self.open_tag):
            if n_open != 0:
                return 0.0
            body = response
        else:
            if n_open != 1:
                return 0.0
            before, _, body = response.partition(self.open_tag)
            if before.strip():
                return 0.0
        thought, found, answer = body.partition(self.close_tag)
        if not found or not thought.strip() or not answer.strip():
            return 0.0
        return self.reward
