"""Observation tokenisation: plain text, or the tokenizer's chat template turn for chat models."""

from __future__ import annotations

from typing import Any

from rlforge.envs.base import Observation
from rlforge.errors import ConfigError

_SENTINEL = "\u2063rlforge-turn\u2063"  # an assistant turn's content, to find where it ends in a rendering


def chat_turn_text(tokenizer: Any, obs: Observation) -> str:
    """The text a chat template puts after an assistant turn's end token, up to the next assistant turn.

    Renders ``[user, assistant, observation]`` with the generation prompt and keeps what follows the assistant's
    content, minus the end-of-turn token the model already sampled (its EOS): the template's own separators,
    role markers and tool-response wrapping are used, and nothing the model said is re-rendered.
    """
    messages = [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": _SENTINEL},
        {"role": obs.role, "content": obs.text},
    ]
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    if _SENTINEL not in rendered:
        raise ConfigError(
            f"the chat template of {getattr(tokenizer, 'name_or_path', '?')!r} rewrites earlier assistant turns, so "
            "observations cannot be appended token-in/token-out; set `module.chat_template false` and format turns "
            "in the environment"
        )
    tail = rendered[rendered.rindex(_SENTINEL) + len(_SENTINEL) :]
    eos = getattr(tokenizer, "eos_token", None)
    return tail[len(eos) :] if eos and tail.startswith(eos) else tail


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
