"""Sampling parameters shared by every generator."""

from __future__ import annotations

from dataclasses import dataclass, field

from rlforge.errors import ConfigError


@dataclass
class SamplingParams:
    """How responses are sampled.

    Args:
        max_new_tokens: Maximum number of tokens sampled per response (> 0).
        temperature: Softmax temperature; 0 means greedy decoding.
        top_p: Nucleus sampling mass in (0, 1].
        top_k: Keep only the k most likely tokens (0 disables).
        n: Number of samples per prompt.
        stop_token_ids: Extra token ids that end a response (the tokenizer's EOS always does).
        seed: Per-request seed, set by the rollout engine (``RLTrainer(sampling_seeds="group")``): prompt ``i``
            of the request samples from ``seed + i`` alone, so its samples do not depend on which other prompts
            share the batch or the rank. ``None``: the generator's own RNG stream. Leave it unset in configs.
    """

    max_new_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    n: int = 1
    stop_token_ids: list[int] = field(default_factory=list)
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.max_new_tokens <= 0:
            raise ConfigError(f"sampling.max_new_tokens must be > 0, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ConfigError(f"sampling.temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"sampling.top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ConfigError(f"sampling.top_k must be >= 0 (0 disables), got {self.top_k}")
        if self.n < 1:
            raise ConfigError(f"sampling.n must be >= 1, got {self.n}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0
