"""Policy models: loading (HF transformers), logprob computation, the bundled tiny default."""

from rlforge.models.loading import DEFAULT_POLICY, load_policy, resolve_model_path
from rlforge.models.logprobs import compute_logprobs, response_logits, token_entropy, token_logprobs, token_stats

__all__ = [
    "DEFAULT_POLICY",
    "compute_logprobs",
    "load_policy",
    "resolve_model_path",
    "response_logits",
    "token_entropy",
    "token_logprobs",
    "token_stats",
]
