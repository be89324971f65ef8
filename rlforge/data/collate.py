"""The one collate function: episodes -> padded ``TrainBatch``."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rlforge.errors import DataError
from rlforge.types import Episode, TrainBatch


def collate_episodes(episodes: Sequence[Episode], pad_token_id: int, device: torch.device | str = "cpu") -> TrainBatch:
    """Pads episodes into ``[left-padded prompt | right-padded response]`` tensors.

    Empty responses are kept (all-zero ``response_mask`` rows) so group statistics stay aligned; at
    least one response column always exists.
    """
    if not episodes:
        raise ValueError("collate_episodes: no episodes to collate")
    for i, ep in enumerate(episodes):
        if not ep.completion.prompt_ids:  # the seed's Completion has no prompt_ids field: it defaults to []
            raise DataError(
                f"collate_episodes: episode {i} has empty completion.prompt_ids; the update scores the response "
                "given the prompt, so set Completion(prompt_ids=...) to the prompt's token ids"
            )
    prompt_len = max(len(e.completion.prompt_ids) for e in episodes)
    resp_len = max(1, max(len(e.completion.token_ids) for e in episodes))
    batch = len(episodes)
    input_ids = torch.full((batch, prompt_len + resp_len), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((batch, prompt_len + resp_len), dtype=torch.long)
    response_mask = torch.zeros((batch, resp_len), dtype=torch.float32)
    old_logprobs = torch.zeros((batch, resp_len), dtype=torch.float32)
    has_ref = all(e.ref_logprobs is not None for e in episodes)
    ref_logprobs = torch.zeros((batch, resp_len), dtype=torch.float32) if has_ref else None
    for i, ep in enumerate(episodes):
        prompt, resp = ep.completion.prompt_ids, ep.completion.token_ids
        n = len(resp)
        input_ids[i, prompt_len - len(prompt) : prompt_len] = torch.tensor(prompt, dtype=torch.long)
        attention_mask[i, prompt_len - len(prompt) : prompt_len + n] = 1
        if n:
            input_ids[i, prompt_len : prompt_len + n] = torch.tensor(resp, dtype=torch.long)
            mask = ep.completion.loss_mask
            response_mask[i, :n] = 1.0 if mask is None else torch.tensor(mask, dtype=torch.float32)
            old_logprobs[i, :n] = torch.tensor(ep.completion.logprobs, dtype=torch.float32)
            if ref_logprobs is not None:
                ref_logprobs[i, :n] = torch.tensor(ep.ref_logprobs, dtype=torch.float32)
    out = TrainBatch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        response_mask=response_mask,
        old_logprobs=old_logprobs,
        ref_logprobs=ref_logprobs,
        advantages=torch.tensor([e.advantage for e in episodes], dtype=torch.float32),
        policy_version=torch.tensor([e.completion.policy_version for e in episodes], dtype=torch.long),
        prompt_len=prompt_len,
    )
    return out.to(device)
