"""Observation tokenisation: plain text, or the tokenizer's chat template turn for chat models."""

from __future__ import annotations

from typing import Any

from rlforge.envs.base import Observation
from rlforge.errors import ConfigError

_ANCHOR = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]


def chat_turn_text(tokenizer: Any, obs: Observation) -> str:
    """The text a chat template puts between a finished assistant turn and the next assistant turn.

    Rendered as the difference of two conversations (one ending with the assistant turn, one with the
    observation and the generation prompt), so the template's own role markers and tool-response wrapping are used.
    """
    before = tokenizer.apply_chat_template(_ANCHOR, tokenize=False)
    after = tokenizer.apply_chat_template(
        _ANCHOR + [{"role": obs.role, "content": obs.text}], tokenize=False, add_generation_prompt=True
    )
    if not after.startswith(before):
        raise ConfigError(
            f"the chat template of {getattr(tokenizer, 'name_or_path', '?')!r} re-renders earlier turns when a "
            f"{obs.role!r} turn is added, so observations cannot be appended token-in/token-out; "
            "set `module.chat_template false` and format turns in the environment"
        )
    return after[len(before) :]


class ModuleTurnEncoder:
    """Encodes prompts as the module does (``encode_prompt``) and observations as plain text or chat turns.

    Args:
        module: The RL module (``encode_prompt``, ``tokenizer``, ``chat_template``).
    """

    def __init__(self, module: Any) -> None:
        self.module, self.tokenizer = module, module.tokenizer
        self.chat = bool(getattr(module, "chat_template", False))

    def prompt(self, text: str) -> list[int]:
        return list(self.module.encode_prompt(text))

    def observation(self, obs: Observation) -> list[int]:
        text = chat_turn_text(self.tokenizer, obs) if self.chat else obs.text
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)


def context_limit(module: Any) -> int | None:
    """The policy's context length (``config.max_position_embeddings``), or ``None`` when it does not say."""
    value = getattr(getattr(module.policy, "config", None), "max_position_embeddings", None)
    return int(value) if isinstance(value, int) else None
