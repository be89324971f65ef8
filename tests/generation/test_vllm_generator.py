"""VLLMGenerator against TorchGenerator and the trainer's logprobs (runs where vLLM is installed).

Build the CPU env with `bash scripts/make_vllm_cpu_env.sh`, run with `bash scripts/test_vllm_cpu.sh`.
"""

from __future__ import annotations

import os
import time

import pytest
import torch

pytest.importorskip(
    "vllm",
    reason="vLLM is not installed here: build its env with `bash scripts/make_vllm_cpu_env.sh`, "
    "then run `bash scripts/test_vllm_cpu.sh`",
)
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in-process engine: starts in seconds
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache on CPU

from rlforge.generation import SamplingParams, TorchGenerator  # noqa: E402
from rlforge.generation.vllm_generator import VLLMGenerator  # noqa: E402
from rlforge.models import compute_logprobs, load_policy  # noqa: E402

TOL = 1e-4
PROMPTS = [[5, 6, 7], [40, 41, 42, 43, 44, 45], [100], [7, 8, 9, 10]]


@pytest.fixture(scope="module")
def engine(tiny_policy_dir: str) -> VLLMGenerator:
    start = time.perf_counter()
    gen = VLLMGenerator(tiny_policy_dir, dtype="float32", seed=0, max_model_len=256, enforce_eager=True)
    print(f"\nvLLM engine start: {time.perf_counter() - start:.1f} s")
    return gen


def _score(model: torch.nn.Module, prompt: list[int], tokens: list[int], temperature: float) -> torch.Tensor:
    """The trainer's logprobs of ``tokens`` after ``prompt`` (teacher forcing)."""
    ids = torch.tensor([prompt + tokens])
    logprobs, _ = compute_logprobs(model, ids, torch.ones_like(ids), len(prompt), temperature)
    return logprobs[0]


def _max_diff_vs_trainer(model, groups, temperature: float) -> float:
    diffs = []
    for group in groups:
        for c in group:
            ref = _score(model, c.prompt_ids, c.token_ids, temperature)
            diffs.append((ref - torch.tensor(c.logprobs)).abs().max().item())
    return max(diffs)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampled_logprobs_match_trainer_logprobs(engine, tiny_policy_dir, temperature):
    model, _ = load_policy(tiny_policy_dir)
    params = SamplingParams(max_new_tokens=12, temperature=temperature, n=4)
    groups = engine.generate(PROMPTS, params)
    assert [len(g) for g in groups] == [4] * len(PROMPTS)
    assert all(len(c.logprobs) == len(c.token_ids) > 0 for g in groups for c in g)
    assert len({tuple(c.token_ids) for c in groups[0]}) > 1, "n samples of one prompt should differ"
    diff = _max_diff_vs_trainer(model, groups, temperature)
    print(f"\nmax |vLLM - trainer| logprob at T={temperature}: {diff:.2e}")
    assert diff < TOL


def test_greedy_matches_torch_generator(engine, tiny_policy_dir):
    model, tokenizer = load_policy(tiny_policy_dir)
    params = SamplingParams(max_new_tokens=12, temperature=0.0)
    ours = engine.generate(PROMPTS, params)
    theirs = TorchGenerator(model, tokenizer).generate(PROMPTS, params)
    for a, b in zip(ours, theirs, strict=True):
        assert a[0].token_ids == b[0].token_ids
        assert a[0].stop_reason == b[0].stop_reason
        assert a[0].text == b[0].text
        diff = (torch.tensor(a[0].logprobs) - torch.tensor(b[0].logprobs)).abs().max().item()
        assert diff < TOL


def test_stop_token_is_kept_like_torch_generator(engine, tiny_policy_dir):
    model, tokenizer = load_policy(tiny_policy_dir)
    greedy = SamplingParams(max_new_tokens=12, temperature=0.0)
    free = engine.generate([PROMPTS[1]], greedy)[0][0].token_ids
    stop = SamplingParams(max_new_tokens=12, temperature=0.0, stop_token_ids=[free[3]])
    ours = engine.generate([PROMPTS[1]], stop)[0][0]
    theirs = TorchGenerator(model, tokenizer).generate([PROMPTS[1]], stop)[0][0]
    assert ours.token_ids == theirs.token_ids == free[: free.index(free[3]) + 1]
    assert ours.stop_reason == theirs.stop_reason == "stop"


@pytest.mark.parametrize("transfer", ["disk", "direct"])
def test_logprobs_follow_updated_weights(engine, tiny_policy_dir, transfer):
    old_model, tokenizer = load_policy(tiny_policy_dir)
    new_model, _ = load_policy(tiny_policy_dir)
    torch.manual_seed({"disk": 1, "direct": 2}[transfer])
    with torch.no_grad():
        for p in new_model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    params = SamplingParams(max_new_tokens=10, temperature=1.0, n=3)
    engine.weight_transfer = transfer
    version = engine.policy_version + 1
    start = time.perf_counter()
    engine.update_weights(new_model.state_dict(), version=version)
    print(f"\nvLLM weight update ({transfer}): {time.perf_counter() - start:.2f} s")
    groups = engine.generate(PROMPTS, params)  # same prompts as before: a stale prefix cache would show here
    assert all(c.policy_version == version for g in groups for c in g)
    new_diff = _max_diff_vs_trainer(new_model, groups, 1.0)
    old_diff = _max_diff_vs_trainer(old_model, groups, 1.0)
    print(f"max |vLLM - trainer| after update: new weights {new_diff:.2e}, old weights {old_diff:.2e}")
    assert new_diff < TOL
    assert old_diff > 1e-2
    greedy = SamplingParams(max_new_tokens=12, temperature=0.0)
    theirs = TorchGenerator(new_model, tokenizer).generate(PROMPTS, greedy)
    ours = engine.generate(PROMPTS, greedy)
    assert [g[0].token_ids for g in ours] == [g[0].token_ids for g in theirs]
    read_back = engine.weights_state_dict() if transfer == "disk" else None
    if read_back is not None:
        assert all(torch.equal(read_back[k], v) for k, v in new_model.state_dict().items())


def test_seeded_sampling_is_reproducible(engine):
    params = SamplingParams(max_new_tokens=8, temperature=1.0, n=2)
    state = engine.state_dict()
    first = engine.generate(PROMPTS, params)
    engine.load_state_dict(state)
    second = engine.generate(PROMPTS, params)
    assert [[c.token_ids for c in g] for g in first] == [[c.token_ids for c in g] for g in second]


def test_request_seed_samples_each_prompt_from_its_own_seed(engine):
    """``SamplingParams.seed``: prompt i from seed + i, so a share of the prompts (another rank's) samples the same."""
    params = SamplingParams(max_new_tokens=8, n=3, seed=500)
    whole = engine.generate(PROMPTS, params)
    share = engine.generate(PROMPTS[2:], SamplingParams(max_new_tokens=8, n=3, seed=502))
    tokens = lambda groups: [[c.token_ids for c in g] for g in groups]  # noqa: E731
    assert tokens(share) == tokens(whole)[2:]
    assert tokens(engine.generate(PROMPTS, params)) == tokens(whole)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only error; sleep mode itself needs CUDA")
def test_sleep_mode_without_cuda_is_a_clear_config_error(tiny_policy_dir):
    from rlforge.errors import ConfigError

    with pytest.raises(ConfigError, match="sleep_between_rollouts"):
        VLLMGenerator(tiny_policy_dir, dtype="float32", max_model_len=256, sleep_between_rollouts=True)


def test_tied_embeddings_follow_weight_updates(tmp_path):
    """Qwen3-1.7B ties lm_head to the embedding; vLLM's CPU lm_head must be re-derived after a reload."""
    from rlforge.models.tiny import build_tiny_model, train_tokenizer
    from tests.conftest import CORPUS

    tokenizer = train_tokenizer(CORPUS * 4, vocab_size=320)
    build_tiny_model(tokenizer, seed=3, tie_word_embeddings=True).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    gen = VLLMGenerator(str(tmp_path), dtype="float32", max_model_len=256, enforce_eager=True)
    new_model, _ = load_policy(str(tmp_path))
    torch.manual_seed(1)
    with torch.no_grad():
        for p in new_model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    for transfer in ("disk", "direct"):
        gen.weight_transfer = transfer
        gen.update_weights(new_model.state_dict(), version=1)
        groups = gen.generate(PROMPTS, SamplingParams(max_new_tokens=8, temperature=1.0, n=2))
        diff = _max_diff_vs_trainer(new_model, groups, 1.0)
        print(f"\ntied model, max |vLLM - trainer| after update ({transfer}): {diff:.2e}")
        assert diff < TOL
