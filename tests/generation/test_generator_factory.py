"""Choosing the generator by name, the missing-extra error for vLLM, and sampling a non-HF policy (main env)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from rlforge import LocalStrategy
from rlforge.errors import ConfigError, MissingDependencyError
from rlforge.generation import GENERATORS, PolicySampler, SamplingParams, TorchGenerator, build_generator
from rlforge.imports import _VLLM_AVAILABLE

REPO = Path(__file__).resolve().parents[2]
needs_no_vllm = pytest.mark.skipif(
    bool(_VLLM_AVAILABLE), reason="vLLM is installed here, so the missing-extra error cannot occur"
)


def test_torch_generator_gets_its_own_frozen_copy(tiny_policy):
    model, tokenizer = tiny_policy
    gen = build_generator("torch", model, tokenizer, seed=3, policy_version=2)
    assert isinstance(gen, TorchGenerator) and gen.policy_version == 2
    assert gen.model is not model and not any(p.requires_grad for p in gen.model.parameters())
    with torch.no_grad():
        next(model.parameters()).add_(1.0)  # the policy moves on; the sampler copy must not
    assert not torch.equal(next(gen.model.parameters()), next(model.parameters()))


def test_unknown_generator_and_torch_options_are_config_errors(tiny_policy):
    model, tokenizer = tiny_policy
    assert GENERATORS == ("torch", "vllm")
    with pytest.raises(ConfigError, match="trainer.strategy.generator must be one of"):
        LocalStrategy(generator="sglang")
    with pytest.raises(ConfigError, match=r"TorchGenerator takes none of \['gpu_memory_utilization'\]"):
        build_generator("torch", model, tokenizer, options={"gpu_memory_utilization": 0.5})
    generator = build_generator("torch", model, tokenizer, options={"compile": False, "static_cache": False})
    assert generator.use_kv_decoder is False


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"cpu_kernels": "false"}, "trainer.strategy.generator_options.cpu_kernels must be true or false, got 'false'"),
        ({"static_cache": 0}, "trainer.strategy.generator_options.static_cache must be true or false, got 0"),
        ({"compile": "yes"}, "trainer.strategy.generator_options.compile must be true, false or 'auto', got 'yes'"),
        ({"compile_after_s": -1}, "trainer.strategy.generator_options.compile_after_s must be a number of seconds"),
        ({"compile_after_s": "60"}, "trainer.strategy.generator_options.compile_after_s must be a number of seconds"),
    ],
)
def test_torch_option_values_are_checked_when_the_strategy_is_built(tiny_policy, options, message):
    """A string such as "false" is truthy: it must not switch a feature on, here or in a generator built later."""
    with pytest.raises(ConfigError) as err:
        LocalStrategy(generator_options=options)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)
    model, tokenizer = tiny_policy
    with pytest.raises(ConfigError, match="generator_options"):
        build_generator("torch", model, tokenizer, options=options)


@needs_no_vllm
def test_missing_vllm_names_the_pip_command_and_the_cpu_env_script(tiny_policy):
    model, tokenizer = tiny_policy
    for make in (lambda: LocalStrategy(generator="vllm"), lambda: build_generator("vllm", model, tokenizer)):
        with pytest.raises(MissingDependencyError) as err:
            make()
        message = str(err.value)
        assert "pip install 'rlforge[vllm]'" in message and "scripts/make_vllm_cpu_env.sh" in message
        assert "\n" not in message


@needs_no_vllm
def test_missing_vllm_is_one_line_from_the_cli(tiny_policy_dir, tmp_path, capsys):
    from rlforge.cli import main
    from tests.helpers import fast_flags

    with pytest.raises(SystemExit) as exit_:
        main(["fit", *fast_flags(tiny_policy_dir, tmp_path), "--trainer.strategy.generator", "vllm"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and len(err.strip().splitlines()) == 1
    assert "pip install 'rlforge[vllm]'" in err


def test_gpu_config_selects_vllm_and_titan(capsys):
    """The shipped GPU config parses and wires both backends (it is not run here)."""
    import yaml

    from rlforge.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["fit", "--config", str(REPO / "configs" / "grpo_gsm8k_qwen3_1_7b.yaml"), "--print_config"])
    assert exit_.value.code in (0, None)
    config = yaml.safe_load(capsys.readouterr().out)
    strategy = config["trainer"]["strategy"]["init_args"]
    assert strategy["generator"] == "vllm" and strategy["generator_options"]["sleep_between_rollouts"] is True
    module = config["module"]["init_args"]
    assert module["backend"] == "titan" and module["backend_options"] == {"flavor": "1.7B"}


class _NotHF(nn.Module):
    """A policy that is not an HF model (like the titan backend): HF-named weights plus ``to_hf_model()``."""

    def __init__(self, hf: nn.Module) -> None:
        super().__init__()
        self.inner = hf

    def state_dict(self, *args, **kwargs):
        return self.inner.state_dict()

    def to_hf_model(self) -> nn.Module:
        import copy

        return copy.deepcopy(self.inner)


def test_policy_sampler_mirrors_a_non_hf_policy_before_each_call(tiny_policy_dir):
    from rlforge.models import load_policy

    hf, tokenizer = load_policy(tiny_policy_dir)
    policy = _NotHF(hf)
    sampler = PolicySampler(policy, tokenizer)
    assert sampler.generator.model is not hf  # sampled through an HF twin
    params = SamplingParams(max_new_tokens=6, temperature=0.0)
    before = sampler.generate([[5, 6, 7]], params)[0][0]
    torch.manual_seed(0)
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(0.1 * torch.randn_like(p))
    after = sampler.generate([[5, 6, 7]], params)[0][0]
    reference = TorchGenerator(hf, tokenizer).generate([[5, 6, 7]], params)[0][0]
    assert after.token_ids == reference.token_ids and after.logprobs == pytest.approx(reference.logprobs, abs=1e-5)
    assert after.logprobs != pytest.approx(before.logprobs, abs=1e-3)


def test_policy_sampler_samples_an_hf_policy_in_place(tiny_policy):
    model, tokenizer = tiny_policy
    assert PolicySampler(model, tokenizer).generator.model is model
