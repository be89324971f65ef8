"""``collate_episodes``: the ``[left-padded prompt | right-padded response]`` layout, written out by hand."""

from __future__ import annotations

import pytest
import torch

from rlforge.data import collate_episodes
from rlforge.errors import DataError
from rlforge.types import Completion, Episode

PAD = 0


def _episode(prompt, tokens, logprobs, advantage=0.0, loss_mask=None, ref=None, version=0) -> Episode:
    completion = Completion(
        text="", token_ids=tokens, logprobs=logprobs, prompt_ids=prompt, loss_mask=loss_mask, policy_version=version
    )
    return Episode("p", "t", completion, advantage=advantage, ref_logprobs=ref)


def test_layout_masks_and_per_token_values_match_a_hand_written_batch():
    episodes = [
        _episode([5, 6, 7], [8, 9], [-0.5, -0.25], advantage=1.5, ref=[-0.4, -0.3], version=2),
        _episode([4], [3, 2, 1], [-1.0, -2.0, -3.0], advantage=-0.5, loss_mask=[1, 0, 1], ref=[-1.5, -2.5, -3.5]),
        _episode([7, 7], [], [], ref=[]),  # an empty response keeps its row
    ]
    batch = collate_episodes(episodes, PAD)
    assert batch.prompt_len == 3
    assert batch.input_ids.tolist() == [[5, 6, 7, 8, 9, PAD], [PAD, PAD, 4, 3, 2, 1], [PAD, 7, 7, PAD, PAD, PAD]]
    assert batch.attention_mask.tolist() == [[1, 1, 1, 1, 1, 0], [0, 0, 1, 1, 1, 1], [0, 1, 1, 0, 0, 0]]
    assert batch.response_mask.tolist() == [[1.0, 1.0, 0.0], [1.0, 0.0, 1.0], [0.0, 0.0, 0.0]]
    assert batch.old_logprobs.tolist() == [[-0.5, -0.25, 0.0], [-1.0, -2.0, -3.0], [0.0, 0.0, 0.0]]
    assert batch.ref_logprobs is not None
    assert torch.equal(batch.ref_logprobs, torch.tensor([[-0.4, -0.3, 0.0], [-1.5, -2.5, -3.5], [0.0, 0.0, 0.0]]))
    assert batch.advantages.tolist() == [1.5, -0.5, 0.0]
    assert batch.policy_version.tolist() == [2, 0, 0]
    dtypes = (batch.input_ids.dtype, batch.attention_mask.dtype, batch.response_mask.dtype, batch.old_logprobs.dtype)
    assert dtypes == (torch.long, torch.long, torch.float32, torch.float32)


def test_reference_logprobs_only_when_every_episode_has_them():
    episodes = [_episode([1], [2], [-0.1], ref=[-0.2]), _episode([1], [3], [-0.3])]
    assert collate_episodes(episodes, PAD).ref_logprobs is None


def test_all_empty_responses_still_give_one_response_column():
    batch = collate_episodes([_episode([1, 2], [], [])], PAD)
    assert batch.input_ids.tolist() == [[1, 2, PAD]] and batch.response_mask.tolist() == [[0.0]]


@pytest.mark.parametrize(
    ("episode", "field"),
    [
        (_episode([1], [2, 3], [-0.1]), "1 completion.logprobs for its 2 response tokens"),
        (_episode([1], [2, 3], [-0.1, -0.2], loss_mask=[1]), "1 loss_mask for its 2 response tokens"),
        (_episode([1], [2], [-0.1], ref=[-0.1, -0.2]), "2 ref_logprobs for its 1 response tokens"),
    ],
)
def test_a_per_token_list_of_the_wrong_length_names_the_episode_and_field(episode, field):
    good = _episode([1], [2], [-0.1], ref=[-0.1])
    with pytest.raises(DataError, match=f"episode 1 has {field}"):
        collate_episodes([good, episode], PAD)
