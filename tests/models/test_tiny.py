"""Tiny-model factory (offline save/reload) and the default policy shipped inside the package."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rlforge.data.tasks import extract_answer, make_task
from rlforge.models.tiny import (
    DEFAULT_POLICY_DIR,
    EOS_TOKEN,
    PAD_TOKEN,
    build_tiny_model,
    generate_completions,
    train_tokenizer,
)

CORPUS = ["Q: What is 47 + 85?\nA: #### 132", "Q: Reverse 1234.\nA: #### 4321", "hello world, plain text."] * 4


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(CORPUS, vocab_size=300)


def test_tokenizer_splits_digits_and_has_special_tokens(tokenizer, tmp_path) -> None:
    tokens = tokenizer.convert_ids_to_tokens(tokenizer("x 12345 + 907")["input_ids"])
    assert [t for t in tokens if t.isdigit()] == list("12345907")
    assert all(len(t) == 1 for t in tokens if any(c.isdigit() for c in t))
    assert (tokenizer.pad_token, tokenizer.pad_token_id) == (PAD_TOKEN, 0)
    assert (tokenizer.eos_token, tokenizer.eos_token_id) == (EOS_TOKEN, 1)
    assert tokenizer.padding_side == "left" and len(tokenizer) <= 300
    text = "Q: What is 47 + 85?\nA: #### 132"
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text
    tokenizer.save_pretrained(tmp_path)
    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    assert reloaded.padding_side == "left" and reloaded.pad_token_id == 0 and reloaded.eos_token_id == 1
    assert reloaded(text)["input_ids"] == tokenizer(text)["input_ids"]


def test_build_save_reload_offline(tokenizer, tmp_path) -> None:
    state = torch.random.get_rng_state()
    model = build_tiny_model(tokenizer, seed=3)
    assert torch.equal(torch.random.get_rng_state(), state)  # initialisation runs under a forked RNG
    assert torch.equal(model.lm_head.weight, build_tiny_model(tokenizer, seed=3).lm_head.weight)
    cfg = model.config
    assert cfg.model_type == "qwen3" and not cfg.tie_word_embeddings and cfg.vocab_size == len(tokenizer)
    assert (cfg.pad_token_id, cfg.eos_token_id) == (0, 1)
    assert model.lm_head.weight.data_ptr() != model.get_input_embeddings().weight.data_ptr()
    assert 0.5e6 < sum(p.numel() for p in model.parameters()) < 1.5e6
    assert next(model.parameters()).dtype == torch.float32
    model.save_pretrained(tmp_path)
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    ids = torch.tensor([tokenizer("Q: What is 47 + 85?")["input_ids"]])
    torch.testing.assert_close(reloaded(ids).logits, model(ids).logits)
    assert build_tiny_model(tokenizer, hidden_size=64, head_dim=16).config.hidden_size == 64


def test_generate_completions_shapes(tokenizer) -> None:
    model = build_tiny_model(tokenizer)
    prompts = ["Q: What is 47 + 85?\nA:", "hi"]  # different lengths: left padding
    texts, prompt_ids, response_ids = generate_completions(
        model, tokenizer, prompts, max_new_tokens=5, temperature=1.0, num_return_sequences=3, generator_seed=0
    )
    assert len(texts) == 6 and prompt_ids.shape[0] == response_ids.shape[0] == 6
    assert response_ids.shape[1] <= 5 and prompt_ids[-1, 0] == tokenizer.pad_token_id
    again, _, _ = generate_completions(
        model, tokenizer, prompts, max_new_tokens=5, temperature=1.0, num_return_sequences=3, generator_seed=0
    )
    assert again == texts
    model.train()
    greedy, _, _ = generate_completions(model, tokenizer, prompts, max_new_tokens=5)
    assert len(greedy) == 2 and model.training  # the train/eval mode is restored


def test_shipped_default_policy_matches_its_warmstart_report() -> None:
    report = json.loads((DEFAULT_POLICY_DIR / "warmstart.json").read_text())
    assert sum(f.stat().st_size for f in DEFAULT_POLICY_DIR.iterdir()) < 10 * 2**20
    tokenizer = AutoTokenizer.from_pretrained(DEFAULT_POLICY_DIR)
    model = AutoModelForCausalLM.from_pretrained(DEFAULT_POLICY_DIR)
    assert tokenizer.padding_side == "left" and model.config.eos_token_id == tokenizer.eos_token_id
    assert not model.config.tie_word_embeddings
    assert sum(p.numel() for p in model.parameters()) == report["num_parameters"]
    splits = make_task(report["task"], seed=report["seed"], **report["task_kwargs"])
    assert len(splits.val) == report["num_val_prompts"] >= 20
    texts, _, _ = generate_completions(
        model, tokenizer, [r["prompt"] for r in splits.val], max_new_tokens=report["eval_max_new_tokens"]
    )
    accuracy = sum(extract_answer(t) == r["target"] for t, r in zip(texts, splits.val, strict=True)) / len(texts)
    assert accuracy == pytest.approx(report["val_greedy_acc"], abs=0.02)
    # Room for RL: right sometimes when sampling, far from solved when greedy.
    assert 0.2 <= report["val_greedy_acc"] <= 0.5 and report["val_sampled_acc_t1"] >= 0.15
