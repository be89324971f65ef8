"""KLMonitor and EntropyCollapseGuard driven into their triggers by real tiny runs (lr 5e-2 collapses the policy)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from rlforge.cli import run
from rlforge.errors import ConfigError
from tests.helpers import fast_flags, metric_rows

TARGET, HORIZON, INIT_BETA = 0.05, 12, 0.01
SAMPLES_PER_STEP = 2 * 3  # data.batch_size x module.group_size of fast_flags


def _fit(policy: str, root: Path, callbacks: str, max_steps: int) -> list[dict[str, str]]:
    run(
        [
            "fit",
            *fast_flags(policy, root, trainer__max_steps=max_steps, module__lr=0.05, trainer__seed=0),
            "--trainer.enable_checkpointing",
            "false",
            "--trainer.callbacks",
            callbacks,
        ]
    )
    return metric_rows(root)


def _col(rows: list[dict[str, str]], name: str) -> list[float]:
    return [float(r[name]) if r.get(name) else 0.0 for r in rows]


def _trigger_steps(entropy: list[float], floor: float, patience: int) -> list[int]:
    """Steps (1-based) where `patience` consecutive entropies below `floor` have accumulated since the last action."""
    steps, below = [], 0
    for step, value in enumerate(entropy, start=1):
        below = below + 1 if value < floor else 0
        if below >= patience:
            steps.append(step)
            below = 0
    return steps


def test_adaptive_kl_and_entropy_bonus(tiny_policy_dir, tmp_path, caplog):
    kl_args = f"{{target: {TARGET}, horizon: {HORIZON}, init_beta: {INIT_BETA}}}"
    callbacks = (
        f"[{{class_path: rlforge.KLMonitor, init_args: {kl_args}}},"
        " {class_path: rlforge.EntropyCollapseGuard, init_args: {min_entropy: 5.0, patience: 2}}]"
    )
    with caplog.at_level(logging.WARNING, logger="rlforge"):
        rows = _fit(tiny_policy_dir, tmp_path, callbacks, max_steps=8)
    kl, beta = _col(rows, "train/kl"), _col(rows, "train/beta")

    # Adaptive controller (Ziegler et al. 2019), recomputed from the logged KL.
    expected = [INIT_BETA]
    for value in kl[:-1]:
        error = min(max(value / TARGET - 1.0, -0.2), 0.2)
        expected.append(expected[-1] * (1.0 + error * SAMPLES_PER_STEP / HORIZON))
    assert beta == pytest.approx(expected, rel=1e-12)
    assert max(kl) > TARGET and beta[-1] > INIT_BETA  # the policy drifted, beta went up

    # Entropy collapse: every trigger step doubles the bonus (first one sets 0.01), logged on that step.
    entropy = _col(rows, "train/entropy")
    triggers = _trigger_steps(entropy, 5.0, 2)
    assert triggers, f"entropy never collapsed: {entropy}"
    assert [s for s, r in enumerate(rows, 1) if r.get("guard/entropy_collapse")] == triggers
    coef, expected_coef = _col(rows, "train/entropy_coef"), []
    value = 0.0
    for step in range(1, len(rows) + 1):
        expected_coef.append(value)
        if step in triggers:
            value = value * 2 if value else 0.01
    assert coef == pytest.approx(expected_coef, rel=1e-12)
    assert f"step {triggers[0]} train/entropy=" in caplog.text and "entropy_coef -> 0.01" in caplog.text


def test_max_kl_stops_and_raise_beta(tiny_policy_dir, tmp_path):
    callbacks = (
        "[{class_path: rlforge.KLMonitor, init_args: {max_kl: 2.0, on_max_kl: stop}},"
        " {class_path: rlforge.EntropyCollapseGuard, init_args: {min_entropy: 5.7, patience: 1, action: raise_beta}}]"
    )
    rows = _fit(tiny_policy_dir, tmp_path, callbacks, max_steps=20)
    kl, entropy, beta = _col(rows, "train/kl"), _col(rows, "train/entropy"), _col(rows, "train/beta")
    over = [s for s, value in enumerate(kl, 1) if value > 2.0]
    assert over and len(rows) == over[0] < 20  # stopped on the first step over max_kl
    assert rows[-1]["guard/kl_exceeded"] == "1.0"
    assert kl[0] == 0.0 and kl[1] > 0.0  # measured with beta = 0: the reference model was built for the monitor
    triggers = _trigger_steps(entropy, 5.7, 1)
    assert triggers and triggers[0] < len(rows)
    expected, value = [], 0.0
    for step in range(1, len(rows) + 1):
        expected.append(value)
        if step in triggers:
            value = value * 2 if value else 0.01
    assert beta == pytest.approx(expected, rel=1e-12)  # beta raised from 0 by the guard, used by later steps


def test_entropy_guard_stop(tiny_policy_dir, tmp_path):
    callbacks = "[{class_path: rlforge.EntropyCollapseGuard, init_args: {min_entropy: 5.0, patience: 2, action: stop}}]"
    rows = _fit(tiny_policy_dir, tmp_path, callbacks, max_steps=20)
    triggers = _trigger_steps(_col(rows, "train/entropy"), 5.0, 2)
    assert triggers and len(rows) == triggers[0] < 20
    assert rows[-1]["guard/entropy_collapse"] == "1.0"


def test_guard_config_errors(tiny_policy_dir, tmp_path):
    from rlforge import EntropyCollapseGuard, KLMonitor

    with pytest.raises(ConfigError, match="action must be one of"):
        EntropyCollapseGuard(min_entropy=1.0, action="panic")
    with pytest.raises(ConfigError, match="init_beta"):
        _fit(tiny_policy_dir, tmp_path, "[{class_path: rlforge.KLMonitor, init_args: {target: 0.1}}]", max_steps=1)
    assert KLMonitor(target=0.1).horizon == 10000
