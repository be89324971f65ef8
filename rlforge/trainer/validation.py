"""Validation scoring: greedy ``val/accuracy`` plus a sampled pass for ``val/pass@1`` and ``val/pass@n``."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from rlforge.generation import SamplingParams
from rlforge.metrics import DEFAULT_PASS_SAMPLES, validation_metrics

if TYPE_CHECKING:
    from rlforge.envs import EnvRunner
    from rlforge.module import RLModule
    from rlforge.services import Generator


def pass_at_k_sampling(module: RLModule) -> SamplingParams | None:
    """Sampling of the extra pass@k pass, or ``None`` when validation already samples ``n > 1`` per prompt.

    Greedy validation (the default) says nothing about pass@k, so ``DEFAULT_PASS_SAMPLES`` samples per prompt
    are drawn at the rollout temperature (``module.sampling``), with validation's ``max_new_tokens``.
    """
    val, rollout = module.val_sampling, getattr(module, "sampling", None)
    if module.supervised or rollout is None or rollout.greedy or val.n > 1 or not val.greedy:
        return None
    return dataclasses.replace(rollout, n=DEFAULT_PASS_SAMPLES, max_new_tokens=val.max_new_tokens)


def validate_rows(
    module: RLModule, sampler: Generator, rows: list[dict[str, Any]], envs: EnvRunner | None = None
) -> dict[str, float]:
    """``val/*`` correctness metrics of ``module`` on ``rows``, sampled by ``sampler`` (empty without targets).

    With ``envs`` (``module.environment``) each row is a greedy episode and correct means the environment's
    ``success`` (else reward > 0); the pass@k pass samples episodes likewise.
    """
    if envs is not None:
        return _validate_episodes(module, sampler, rows, envs)
    was_training = module.policy.training
    module.policy.eval()
    try:
        prompt_ids = [module.encode_prompt(row["prompt"]) for row in rows]
        completions = sampler.generate(prompt_ids, module.val_sampling)
        if not any(str(row.get("target", "")) for row in rows):
            return {}
        params = pass_at_k_sampling(module)
        sampled = None if params is None else sampler.generate(prompt_ids, params)
    finally:
        module.policy.train(was_training)

    def score(groups: list[list[Any]]) -> list[list[bool]]:
        return [
            [module.is_correct(row["prompt"], c.text, str(row["target"])) for c in group]
            for row, group in zip(rows, groups, strict=True)
        ]

    return validation_metrics(score(completions), None if sampled is None else score(sampled))


def _validate_episodes(module: RLModule, sampler: Generator, rows: list[dict[str, Any]], envs: EnvRunner) -> dict:
    from rlforge.envs.encoding import ModuleTurnEncoder, context_limit
    from rlforge.envs.episodes import group_seed, run_episodes

    encoder, seeds = ModuleTurnEncoder(module), [group_seed(0, -1, i) for i in range(len(rows))]
    mode = module.environment.reward_mode

    def successes(params: SamplingParams) -> list[list[bool]]:
        groups = run_episodes(
            rows, params.n, sampler, envs, encoder, params, seeds, reward_mode=mode, max_context=context_limit(module)
        )
        return [[bool(ep.success) for ep in group] for group in groups]

    was_training = module.policy.training
    module.policy.eval()
    try:
        correct = successes(module.val_sampling)
        params = pass_at_k_sampling(module)
        sampled = None if params is None else successes(params)
    finally:
        module.policy.train(was_training)
    return validation_metrics(correct, sampled)
