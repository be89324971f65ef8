"""KVDecoder reproduces the HF forward: same sampled tokens and logprobs on each supported architecture."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from rlforge.generation import SamplingParams, TorchGenerator
from rlforge.generation import decoder as decoder_mod
from rlforge.generation.decoder import KVDecoder
from rlforge.generation.linear import onednn_projections

SMALL = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 128,
}
ARCHS = {
    "qwen3": {"head_dim": 16},
    "qwen2": {},  # q/k/v biases
    "llama": {
        "mlp_bias": True,
        "rope_parameters": {
            "rope_type": "llama3",
            "rope_theta": 10000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 32,
        },
    },
    "mistral": {"sliding_window": None},
}


def _model(arch: str, tokenizer) -> torch.nn.Module:
    config = AutoConfig.for_model(
        arch,
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        **SMALL,
        **ARCHS[arch],
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        for p in model.parameters():  # non-zero biases and norms, so every term is exercised
            p.data.add_(torch.randn_like(p) * 0.05)
    return model.eval()


def _assert_same_samples(ours, hf) -> None:
    """Same tokens and stop reasons as the HF forward's generation, logprobs within 1e-5."""
    for group, ref_group in zip(ours, hf, strict=True):
        for c, ref in zip(group, ref_group, strict=True):
            assert c.token_ids == ref.token_ids and c.stop_reason == ref.stop_reason
            assert max((abs(a - b) for a, b in zip(c.logprobs, ref.logprobs, strict=True)), default=0) < 1e-5


@pytest.mark.parametrize("cpu_kernels", [True, False], ids=["cpu_kernels", "bmm"])
@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_kv_decoder_matches_hf_forward(arch, cpu_kernels, tiny_policy):
    """Both decode attentions (rlforge's CPU kernels, ``torch.bmm``) against the HF forward."""
    _, tokenizer = tiny_policy
    model = _model(arch, tokenizer)
    assert KVDecoder.supports(model, 40)
    assert KVDecoder(model, native_attention=cpu_kernels).native_attention is cpu_kernels  # the path under test
    prompts = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in ["Q: What is 3 + 5?\nA:", "Hi", "1+1="]]
    for params in (SamplingParams(max_new_tokens=12, n=3), SamplingParams(max_new_tokens=12, temperature=0.0)):
        ours = TorchGenerator(model, tokenizer, seed=4, cpu_kernels=cpu_kernels).generate(prompts, params)
        hf = TorchGenerator(model, tokenizer, seed=4, static_cache=False).generate(prompts, params)
        _assert_same_samples(ours, hf)


def test_unsupported_models_fall_back(tiny_policy):
    model, tokenizer = tiny_policy
    assert KVDecoder.supports(model, 64)
    assert not KVDecoder.supports(model, model.config.max_position_embeddings + 1)
    gpt2 = AutoModelForCausalLM.from_config(
        AutoConfig.for_model("gpt2", vocab_size=len(tokenizer), n_embd=32, n_layer=1, n_head=2, n_positions=64)
    )
    assert not KVDecoder.supports(gpt2, 16)
    groups = TorchGenerator(gpt2, tokenizer, seed=0).generate([[5, 6, 7]], SamplingParams(max_new_tokens=4, n=2))
    for c in groups[0]:
        assert 1 <= len(c.token_ids) == len(c.logprobs) <= 4 and all(lp <= 0 for lp in c.logprobs)
        assert (c.stop_reason == "stop") == (c.token_ids[-1] == tokenizer.eos_token_id)


@pytest.mark.parametrize("onednn", [True, False], ids=["onednn", "mkl"])
def test_cpu_decode_steps_run_one_stacked_qkv_product(onednn, tiny_policy, monkeypatch):
    """On CPU every decode step projects q/k/v in one product, with oneDNN or torch's own GEMMs (Intel's default),
    and matches the HF forward as the three products do."""
    model, tokenizer = tiny_policy
    seen = []
    original = decoder_mod.project_qkv

    def recorded(attn, h, heads, h_query=None, stacked=None):
        seen.append(stacked is not None)
        return original(attn, h, heads, h_query, stacked)

    monkeypatch.setattr(decoder_mod, "project_qkv", recorded)
    prompts = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in ["Q: What is 3 + 5?\nA:", "1+1="]]
    params = SamplingParams(max_new_tokens=6, n=2)
    with onednn_projections(onednn):
        ours = TorchGenerator(model, tokenizer, seed=3).generate(prompts, params)
    hf = TorchGenerator(model, tokenizer, seed=3, static_cache=False).generate(prompts, params)
    assert seen and all(seen)
    _assert_same_samples(ours, hf)
