"""DAPO's data-side techniques (Yu et al. 2025), as small pieces the trainer calls between rollout and loss.

- Overlong reward shaping: ``overlong_penalty`` / ``apply_overlong_penalty`` (soft punishment near the length cap).
- Dynamic sampling: ``dynamic_sample`` keeps only groups whose rewards differ (``has_reward_variance``), since a
  group with equal rewards has zero advantage and contributes no gradient.
- Overlong filtering: ``mask_truncated`` removes completions cut off at the length cap from the loss.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from rlforge.errors import ConfigError
from rlforge.types import Episode, Group


def overlong_penalty(response_len: int, max_len: int, cache_len: int, penalty: float = 1.0) -> float:
    """DAPO's soft overlong punishment, scaled by ``penalty``.

    .. code-block:: text

        R_length(y) = 0                                   if |y| <= L_max - L_cache
                    = ((L_max - L_cache) - |y|) / L_cache  if L_max - L_cache < |y| <= L_max
                    = -1                                  if |y| > L_max

    Args:
        response_len: ``|y|``, the number of response tokens.
        max_len: ``L_max``, the length at which the full penalty applies.
        cache_len: ``L_cache``, the width of the linear ramp before ``max_len`` (0: a step at ``max_len``).
        penalty: Size of the full penalty (the result lies in ``[-penalty, 0]``).

    Raises:
        ConfigError: ``max_len < 1``, ``cache_len`` outside ``[0, max_len]`` or ``penalty < 0``.
    """
    if max_len < 1 or not 0 <= cache_len <= max_len or penalty < 0:
        raise ConfigError(
            f"overlong shaping needs max_len >= 1, 0 <= cache_len <= max_len and penalty >= 0; "
            f"got max_len={max_len}, cache_len={cache_len}, penalty={penalty}"
        )
    ramp_start = max_len - cache_len
    if response_len <= ramp_start:
        return 0.0
    if response_len <= max_len:
        return penalty * (ramp_start - response_len) / cache_len
    return -penalty


def apply_overlong_penalty(episodes: Sequence[Episode], max_len: int, cache_len: int, penalty: float = 1.0) -> None:
    """Adds ``overlong_penalty`` of each completion's token count to ``episode.reward`` (in place).

    The added value is also stored as ``episode.reward_breakdown["overlong_penalty"]``.

    Args:
        episodes: Episodes whose rewards are already filled in.
        max_len: ``L_max`` (usually the sampler's ``max_new_tokens``).
        cache_len: ``L_cache``, the soft ramp width.
        penalty: Size of the full penalty.
    """
    for episode in episodes:
        value = overlong_penalty(len(episode.completion.token_ids), max_len, cache_len, penalty)
        episode.reward += value
        episode.reward_breakdown["overlong_penalty"] = value


def has_reward_variance(group: Group) -> bool:
    """True when the episodes of ``group`` do not all have the same reward (a group of < 2 never does)."""
    return len({episode.reward for episode in group}) > 1


def dynamic_sample(
    sample_fn: Callable[[], list[Group]], num_groups: int, max_tries: int
) -> tuple[list[Group], dict[str, float]]:
    """DAPO's dynamic sampling: sample until ``num_groups`` groups with reward variance are collected.

    ``sample_fn`` is called until enough groups with differing rewards are kept or ``max_tries`` calls were
    made. Extra informative groups beyond ``num_groups`` are discarded. If too few were found, the batch is
    topped up with zero-variance groups (in sampling order) so it is full whenever enough groups were sampled;
    informative groups come first.

    Args:
        sample_fn: Returns a list of groups with rewards already set on ``episode.reward``.
        num_groups: Groups wanted in the batch.
        max_tries: Most calls to ``sample_fn``.

    Returns:
        ``(groups, stats)`` with stats ``rollout/dynamic_tries`` (calls made), ``rollout/dropped_groups``
        (zero-variance groups left out), ``rollout/topped_up_groups`` (zero-variance groups used to fill the
        batch) and ``rollout/sampled_groups`` (all groups sampled).

    Raises:
        ConfigError: ``num_groups < 1`` or ``max_tries < 1``.
    """
    if num_groups < 1 or max_tries < 1:
        raise ConfigError(
            f"dynamic sampling needs num_groups >= 1 and max_tries >= 1; got {num_groups} and {max_tries}"
        )
    kept: list[Group] = []
    zero_variance: list[Group] = []
    tries = sampled = 0
    while len(kept) < num_groups and tries < max_tries:
        groups = sample_fn()
        tries += 1
        sampled += len(groups)
        for group in groups:
            (kept if has_reward_variance(group) else zero_variance).append(group)
    kept = kept[:num_groups]
    top_up = zero_variance[: num_groups - len(kept)]
    stats = {
        "rollout/dynamic_tries": float(tries),
        "rollout/dropped_groups": float(len(zero_variance) - len(top_up)),
        "rollout/topped_up_groups": float(len(top_up)),
        "rollout/sampled_groups": float(sampled),
    }
    return kept + top_up, stats


def mask_truncated(episodes: Sequence[Episode], response_mask: Tensor | None = None) -> Tensor:
    """DAPO's overlong filtering: drop completions that hit the length cap (``stop_reason == "length"``).

    Args:
        episodes: The ``B`` episodes of a batch, in row order.
        response_mask: Optional ``[B, T]`` response mask to apply the filter to.

    Returns:
        ``response_mask`` with truncated rows zeroed when given; otherwise a ``[B]`` float tensor that is 0 for
        truncated episodes and 1 for the others (multiply it into the response mask).
    """
    keep = torch.tensor([0.0 if episode.completion.truncated else 1.0 for episode in episodes])
    if response_mask is None:
        return keep
    if response_mask.shape[0] != len(keep):
        raise ValueError(f"response_mask has {response_mask.shape[0]} rows but {len(keep)} episodes were given")
    return response_mask * keep.to(device=response_mask.device, dtype=response_mask.dtype).unsqueeze(-1)
