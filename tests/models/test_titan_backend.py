"""The torchtitan policy backend against the HF model it converts (runs where torchtitan is installed).

Build the env with `bash scripts/make_titan_env.sh`, run with `bash scripts/test_titan_cpu.sh`.
"""

from __future__ import annotations

import copy
import csv

import pytest
import torch

pytest.importorskip(
    "torchtitan",
    reason="torchtitan is not installed here: build its env with `bash scripts/make_titan_env.sh`, "
    "then run `bash scripts/test_titan_cpu.sh`",
)

from rlforge import GRPOModule, ModelCheckpoint, RLDataModule, RLTrainer  # noqa: E402
from rlforge.generation import TorchGenerator  # noqa: E402
from rlforge.models import compute_logprobs, load_policy  # noqa: E402
from rlforge.models.tiny import build_tiny_model, train_tokenizer  # noqa: E402
from rlforge.models.titan_policy import TitanPolicy  # noqa: E402


@pytest.fixture(scope="module")
def tied_policy_dir(tmp_path_factory) -> str:
    from tests.conftest import CORPUS

    path = tmp_path_factory.mktemp("tied_policy")
    tokenizer = train_tokenizer(CORPUS * 4, vocab_size=320)
    build_tiny_model(tokenizer, seed=3, tie_word_embeddings=True).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.mark.parametrize("which", ["untied", "tied"])
def test_hf_titan_hf_round_trip_is_exact(tiny_policy_dir, tied_policy_dir, which, tmp_path):
    from transformers import AutoModelForCausalLM

    path = {"untied": tiny_policy_dir, "tied": tied_policy_dir}[which]
    hf, _ = load_policy(path)
    titan = TitanPolicy.from_pretrained(path)
    assert type(titan.model).__name__ == "Qwen3Model"  # torchtitan's own module, not the HF one
    ref = hf.state_dict()
    back = titan.state_dict()
    assert set(back) == set(ref)
    diff = max((back[k] - ref[k]).abs().max().item() for k in ref)
    print(f"\nHF->titan->HF ({which}) max weight diff: {diff}")
    assert diff == 0.0
    titan.save_pretrained(tmp_path)
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path).state_dict()
    assert all(torch.equal(reloaded[k], ref[k]) for k in ref)


def test_titan_logits_match_hf_with_left_padding(tiny_policy_dir):
    hf, tokenizer = load_policy(tiny_policy_dir)
    titan, _ = load_policy(tiny_policy_dir, backend="titan")
    assert isinstance(titan, TitanPolicy) and titan.attention == "ScaledDotProductAttention"
    # [left-padded prompt | right-padded response], as collate_episodes lays out a batch
    ids = torch.tensor([[0, 0, 5, 6, 7, 8, 9, 0], [11, 12, 13, 14, 15, 16, 17, 18], [0, 0, 0, 21, 22, 23, 0, 0]])
    mask = (torch.arange(8)[None] >= torch.tensor([2, 0, 3])[:, None]) & (
        torch.arange(8)[None] < torch.tensor([7, 8, 6])[:, None]
    )
    mask = mask.long()
    ours, _ = compute_logprobs(titan, ids, mask, prompt_len=4)
    theirs, _ = compute_logprobs(hf, ids, mask, prompt_len=4)
    real = mask[:, 4:].bool()
    diff = (ours - theirs)[real].abs().max().item()
    print(f"\nmax |titan - HF| logprob with padding: {diff:.2e}")
    assert diff < 1e-5


def test_titan_policy_trains_with_rlforge_optimizer_and_sync(tiny_policy_dir, tmp_path):
    """GRPO steps on CPU: torchtitan model + the module's AdamW/scheduler; rollouts from its HF twin."""
    from tests.helpers import char_reward

    module = GRPOModule(
        model=tiny_policy_dir, backend="titan", group_size=4, reward_fns=[char_reward], lr=1e-3, warmup_steps=1
    )
    trainer = RLTrainer(
        max_steps=4,
        default_root_dir=str(tmp_path),
        enable_progress_bar=False,
        val_check_interval=4,
        seed=0,
        callbacks=[ModelCheckpoint(every_n_steps=4)],
    )
    trainer.fit(module, RLDataModule(batch_size=4))
    assert isinstance(module.policy, TitanPolicy)
    with open(trainer.log_dir / "metrics.csv") as f:
        rows = [r for r in csv.DictReader(f) if r.get("train/loss")]
    assert len(rows) == 4
    # Rollouts come from the synced HF twin: on-policy ratios of exactly 1 mean titan and HF agree each step.
    for row in rows:
        assert abs(float(row["train/ratio_max"]) - 1) < 1e-4 and abs(float(row["train/ratio_min"]) - 1) < 1e-4
    start = load_policy(tiny_policy_dir)[0].state_dict()
    moved = max((module.policy.state_dict()[k] - v).abs().max().item() for k, v in start.items())
    assert moved > 1e-4
    # The checkpoint is a plain HF folder holding exactly the trained titan weights.
    from transformers import AutoModelForCausalLM

    saved = AutoModelForCausalLM.from_pretrained(
        tmp_path / "rlforge" / "version_0" / "checkpoints" / "step-000004" / "policy"
    ).state_dict()
    assert all(torch.equal(saved[k], v) for k, v in module.policy.state_dict().items())


def test_titan_supervised_loss_goes_down(tiny_policy_dir):
    """Plain fwd/bwd/AdamW on torchtitan's module on CPU: next-token loss on a fixed batch decreases."""
    titan, tokenizer = load_policy(tiny_policy_dir, backend="titan")
    ids = torch.tensor([tokenizer("Q: What is 3 + 5?\nA: #### 8")["input_ids"]] * 2)
    opt = torch.optim.AdamW(titan.parameters(), lr=3e-3)
    losses = []
    for _ in range(8):
        logits = titan(input_ids=ids).logits[:, :-1]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    print(f"\ntitan CPU loss: {losses[0]:.3f} -> {losses[-1]:.3f}")
    assert losses[-1] < 0.7 * losses[0]


def test_hf_twin_samples_like_the_hf_model(tiny_policy_dir):
    hf, tokenizer = load_policy(tiny_policy_dir)
    titan = TitanPolicy.from_pretrained(tiny_policy_dir)
    twin = titan.to_hf_model()
    params = __import__("rlforge").SamplingParams(max_new_tokens=6, temperature=0.0)
    a = TorchGenerator(twin, tokenizer).generate([[5, 6, 7]], params)[0][0]
    b = TorchGenerator(hf, tokenizer).generate([[5, 6, 7]], params)[0][0]
    assert a.token_ids == b.token_ids
    assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < 1e-5
    assert copy.deepcopy(titan).state_dict().keys() == titan.state_dict().keys()
