"""Hardening issue, loss/reward/metric cases (2, 4, 5, 6, 7, 11, 21, 22): each test failed on the code before the fix.

References are independent of the code under test: Python-float transcriptions of the formulas, brute-force
enumeration for pass@k, exact integer arithmetic for powers.
"""

from __future__ import annotations

import csv
import itertools
import logging
import math
import random
import subprocess
import sys
import textwrap
from fractions import Fraction
from pathlib import Path

import pytest
import torch
import torchmetrics

from rlforge.callbacks.progress import ProgressBar
from rlforge.cli import run
from rlforge.data import collate_episodes
from rlforge.errors import DataError
from rlforge.losses import CISPOLoss, DAPOLoss, DrGRPOLoss, GRPOLoss, GSPOLoss, ReinforceLoss, SAPOLoss
from rlforge.losses.reinforce import SimpleGRPOLoss
from rlforge.metrics import PassAtK, ValAccuracy, pass_at_k, rollout_metrics, validation_metrics
from rlforge.rewards import MathReward
from rlforge.types import Completion, Episode
from tests.helpers import fast_flags

REPO = Path(__file__).resolve().parents[2]
ALL_LOSSES = (GRPOLoss, DAPOLoss, DrGRPOLoss, CISPOLoss, GSPOLoss, SAPOLoss, ReinforceLoss, SimpleGRPOLoss)


def _batch(seed: int = 0, dtype: torch.dtype = torch.float64) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([5, 3, 1, 4])
    mask = (torch.arange(5) < lengths[:, None]).to(dtype)
    lp = -2 * torch.rand(4, 5, generator=gen, dtype=torch.float64) - 0.1
    old = lp + 0.4 * torch.randn(4, 5, generator=gen, dtype=torch.float64)
    ref = lp + 0.3 * torch.randn(4, 5, generator=gen, dtype=torch.float64)
    adv = torch.tensor([1.0, -0.5, 0.25, -0.75], dtype=torch.float64)
    return {"logprobs": lp.to(dtype), "old": old, "ref": ref, "adv": adv, "mask": mask}


def _csv_rows(root: Path) -> list[dict[str, str]]:
    (metrics,) = root.glob("rlforge/version_*/metrics.csv")
    with open(metrics) as f:
        return list(csv.DictReader(f))


# ------------------------------------------------------------------------------------- case 2: unmeasured KL
@pytest.mark.parametrize("cls", ALL_LOSSES, ids=lambda c: c.__name__)
def test_kl_absent_when_not_measured(cls):
    b = _batch()
    loss_fn = cls(beta=0.0)
    loss_fn(b["logprobs"], None, b["adv"], b["mask"], b["old"])
    assert "kl" not in loss_fn.last_metrics  # was reported as 0.0
    loss_fn(b["logprobs"], b["ref"], b["adv"], b["mask"], b["old"])  # a reference: measured, even at beta 0
    valid = b["mask"].bool()
    log_r = (b["ref"] - b["logprobs"])[valid].tolist()
    expected = sum(math.exp(x) - x - 1 for x in log_r) / len(log_r)  # k3, by hand
    assert loss_fn.last_metrics["kl"] == pytest.approx(expected, abs=1e-12)


def test_fit_without_reference_logs_no_kl_and_plots(tiny_policy_dir, tmp_path):
    run(["fit", *fast_flags(tiny_policy_dir, tmp_path)])  # default GRPOLoss: beta 0, no KLMonitor
    rows = _csv_rows(tmp_path)
    assert rows and "train/kl" not in rows[0] and rows[-1]["train/loss"] != ""
    pytest.importorskip("matplotlib")
    from rlforge.plot import plot_run

    assert plot_run(tmp_path).stat().st_size > 0


def test_progress_bar_has_no_negative_zero():
    text = ProgressBar._describe({"train/loss": -0.0, "train/kl": -1e-7, "rollout/reward_mean": 0.5})
    assert text == "reward=0.500 kl=0.0000 loss=0.0000"
    assert ProgressBar._describe({"train/loss": -0.25}) == "loss=-0.2500"
    assert "kl" not in ProgressBar._describe({"train/loss": 0.1})  # absent, not 0


# ------------------------------------------------------------------------------ case 4: fp64 in, fp64 math
def _sapo_by_hand(b: dict[str, torch.Tensor], tau_pos: float = 1.0, tau_neg: float = 1.05) -> float:
    """SAPO (arXiv:2511.20347) in Python floats: -1/G Σ_i 1/|o_i| Σ_t σ(τ(r-1))·4/τ·Â_i."""
    total = 0.0
    for i in range(b["mask"].shape[0]):
        n = int(b["mask"][i].sum())
        row = 0.0
        for t in range(n):
            r = math.exp(float(b["logprobs"][i, t]) - float(b["old"][i, t]))
            a = float(b["adv"][i])
            tau = tau_pos if a > 0 else tau_neg
            row += 1 / (1 + math.exp(-tau * (r - 1))) * 4 / tau * a
        total += -row / n if n else 0.0
    return total / b["mask"].shape[0]


def test_sapo_fp64_matches_formula_with_fp32_logprobs():
    """Old code cast everything to fp32 when logprobs were fp32, even with fp64 old/ref/advantages."""
    b = _batch(seed=1, dtype=torch.float32)
    b["mask"] = b["mask"].double()
    loss = SAPOLoss()(b["logprobs"], None, b["adv"], b["mask"], b["old"])
    assert loss.dtype == torch.float64
    expected = _sapo_by_hand(b)
    assert abs(loss.item() - expected) <= 1e-12 * abs(expected)


@pytest.mark.parametrize("cls", ALL_LOSSES, ids=lambda c: c.__name__)
def test_losses_keep_fp64_and_upcast_half(cls):
    b = _batch(seed=2)
    lp32 = b["logprobs"].float().requires_grad_(True)
    loss = cls(beta=0.05)(lp32, b["ref"], b["adv"], b["mask"], b["old"])
    loss.backward()
    assert loss.dtype == torch.float64 and lp32.grad.dtype == torch.float32
    bf = {k: v.to(torch.bfloat16) for k, v in b.items()}
    assert cls(beta=0.05)(bf["logprobs"], bf["ref"], bf["adv"], bf["mask"], bf["old"]).dtype == torch.float32


# --------------------------------------------------------------------------------- case 5: small powers
@pytest.mark.parametrize(
    ("response", "target", "expected"),
    [
        (r"\boxed{2^{10}}", "1024", 1.0),
        (r"\boxed{2^{100}}", str(2**100), 1.0),
        (r"\boxed{3 \times 10^{5}}", "300000", 1.0),
        (r"\boxed{(-3)^{3}}", "-27", 1.0),
        (r"\boxed{2^{-2}}", "0.25", 1.0),
        (r"\boxed{2^{10}}", "1023", 0.0),
        (r"\boxed{2^{1000000}}", "1", 0.0),  # too big to build: not evaluated, wrong
    ],
)
def test_math_reward_evaluates_small_powers(response, target, expected):
    assert MathReward()("q", response, target) == expected


def test_math_reward_symbolic_powers_judged_by_cost_not_syntax():
    reward = MathReward()
    assert reward("q", r"\boxed{2^{2^{3}} x}", "256x") == 1.0  # a tower, but a small one (was rejected)
    assert reward("q", r"\boxed{2^{1000}+x}", "x+2^{1000}") == 1.0  # exponent over 200 (was rejected)
    assert reward("q", r"\boxed{2^{2^{2^{2^{2}}}}}", "x") == 0.0  # 2^65536: refused before sympy sees it


# ------------------------------------------------------------------------------ case 6: seed Completion
def test_completion_seed_fields_only():
    c = Completion(text="42", token_ids=[5, 6], logprobs=[-0.1, -0.2], metadata={"sampler": "seed"})
    assert c.prompt_ids == [] and c.stop_reason == "stop" and c.metadata == {"sampler": "seed"}
    assert Completion(text="", token_ids=[], logprobs=[], metadata={}).prompt_ids is not c.prompt_ids
    episodes = [Episode("p", "42", c, reward=1.0), Episode("p", "42", Completion("4", [7], [-1.0], [1, 2]))]
    assert rollout_metrics([episodes], policy_version=0)["rollout/response_len"] == 1.5
    with pytest.raises(DataError, match=r"episode 0 has empty completion.prompt_ids"):  # not a silent mis-shift
        collate_episodes(episodes, pad_token_id=0)
    c.prompt_ids = [3]
    batch = collate_episodes(episodes, pad_token_id=0)
    assert batch.input_ids[0].tolist() == [0, 3, 5, 6] and batch.response_mask[0].tolist() == [1, 1]


# ------------------------------------------------------------------------- case 7: ReinforceLoss clip_ratio
def _reinforce_by_hand(b: dict[str, torch.Tensor], low: float, high: float) -> float:
    total = 0.0
    for i in range(b["mask"].shape[0]):
        n = int(b["mask"][i].sum())
        row = 0.0
        for t in range(n):
            lp, old = float(b["logprobs"][i, t]), float(b["old"][i, t])
            w = min(max(math.exp(lp - old), low), high)
            row += -w * float(b["adv"][i]) * lp
        total += row / n if n else 0.0
    return total / b["mask"].shape[0]


def test_reinforce_clip_ratio_seed_meaning_and_legacy():
    from rlforge.losses.reinforce_loss import ReinforceLoss as SeedPath  # torchforge's module path

    assert SeedPath is ReinforceLoss
    b = _batch(seed=4)
    seed = ReinforceLoss(clip_ratio=0.2)  # raised "must be > 1" before
    value = seed(b["logprobs"], None, b["adv"], b["mask"], b["old"])
    assert value.item() == pytest.approx(_reinforce_by_hand(b, 0.8, 1.2), abs=1e-12)
    assert seed.clip_range == (0.8, 1.2) and seed.last_metrics["clip_frac"] > 0
    legacy = ReinforceLoss(clip_ratio=10.0)(b["logprobs"], None, b["adv"], b["mask"], b["old"])
    assert legacy.item() == pytest.approx(_reinforce_by_hand(b, 0.1, 10.0), abs=1e-12)


def test_simple_grpo_seed_call():
    b = _batch(seed=5, dtype=torch.float32)
    loss_fn = SimpleGRPOLoss(beta=0.1)
    loss = loss_fn(logprobs=b["logprobs"], ref_logprobs=b["ref"], advantages=b["adv"], padding_mask=b["mask"])
    valid = b["mask"].bool()
    per_seq = []
    for i in range(4):
        idx = valid[i].nonzero().flatten().tolist()
        terms = [-float(b["adv"][i]) + 0.1 * _k3(float(b["logprobs"][i, t]), float(b["ref"][i, t])) for t in idx]
        per_seq.append(sum(terms) / len(terms))
    assert loss.item() == pytest.approx(sum(per_seq) / 4, rel=1e-5)


def _k3(lp: float, ref: float) -> float:
    return math.exp(ref - lp) - (ref - lp) - 1


# ------------------------------------------------------------------------ case 11: a payload cannot freeze us
def _run_isolated(code: str, limit_s: float) -> tuple[str, str]:
    """Runs ``code`` in a fresh interpreter killed after ``limit_s``: a regression fails instead of hanging CI."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)],
            cwd=REPO,
            env={"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=limit_s,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running after {limit_s}s (the payload froze the process)")
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, done.stderr


def test_nested_power_payload_scores_zero_quickly():
    out, _ = _run_isolated(
        r"""
        import time
        from rlforge.rewards import MathReward, RewardRunner
        payload = r"\boxed{(((9^{200})^{200})^{200})^{200}}"
        start = time.monotonic()
        assert MathReward()("q", payload, "x+1") == 0.0
        result = RewardRunner([MathReward()], timeout_s=1.0)(["q", "q"], [payload, r"\boxed{x+1}"], ["x+1", "x+1"])
        assert result.rewards == [0.0, 1.0], result
        print(f"{time.monotonic() - start:.2f}")
        """,
        limit_s=90,
    )
    assert float(out.split()[-1]) < 5.0


def test_process_isolation_kills_a_call_stuck_in_c():
    """A reward stuck in one C call holding the GIL (a huge int power): threads cannot even notice the time limit;
    a worker process is killed, the call scores 0 and is counted in reward/errors."""
    out, _ = _run_isolated(
        """
        import re
        import time
        from rlforge.rewards import RewardRunner

        def stuck_in_c(prompt, response, target):
            # Catastrophic backtracking: ~2^60 steps inside one call of the C regex engine, GIL held.
            return float(re.match(r"(a+)+$", "a" * 60 + "!") is None)

        def quick(prompt, response, target):
            return float(len(response))

        runner = RewardRunner([stuck_in_c, quick], timeout_s=1.0, max_error_frac=1.0, isolation="process")
        start = time.monotonic()
        result = runner(["q"], ["abc"], ["t"])
        elapsed = time.monotonic() - start
        assert result.rewards == [3.0] and result.metrics["reward/errors"] == 1.0, result
        assert "TimeoutError" in result.errors[0]
        assert runner(["q"], ["ab"], ["t"]).rewards == [2.0]  # a fresh worker replaced the killed one
        runner.close()
        print(f"{elapsed:.2f}")
        """,
        limit_s=120,
    )
    assert float(out.split()[-1]) < 30.0


# ---------------------------------------------------------------------------- case 21: pass@k and reductions
def _brute_pass_at_k(n: int, c: int, k: int) -> Fraction:
    """The probability that k of the n samples drawn without replacement include a correct one, by enumeration."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return Fraction(sum(any(samples[i] for i in s) for s in subsets), len(subsets))


def test_pass_at_k_matches_enumeration():
    for n in range(1, 8):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(float(_brute_pass_at_k(n, c, k)), abs=1e-15)
    rows = [[True, False, False, True], [False] * 4, [True] * 4, [False, True, False, False]]
    for k in (1, 2, 4):
        metric = PassAtK(k)
        metric.update(rows[:2])
        metric.update(rows[2:])
        expected = sum(_brute_pass_at_k(4, sum(r), k) for r in rows) / 4
        assert float(metric.compute()) == pytest.approx(float(expected), abs=1e-15)
    acc = ValAccuracy()
    acc.update(rows)
    assert float(acc.compute()) == pytest.approx(7 / 16)
    assert isinstance(acc, torchmetrics.Metric) and isinstance(metric, torchmetrics.Metric)
    m = validation_metrics([[True], [False]], sampled=rows[:2])
    assert m == {"val/accuracy": 0.5, "val/pass@1": pytest.approx(0.25), "val/pass@4": 0.5}


def test_default_run_logs_pass_at_k(tiny_policy_dir, tmp_path):
    flags = fast_flags(tiny_policy_dir, tmp_path, trainer__val_check_interval=2, data__val_size=6)
    run(["fit", *flags])
    val = [r for r in _csv_rows(tmp_path) if r.get("val/accuracy")]
    assert [r["step"] for r in val] == ["0", "2"]
    for row in val:  # greedy accuracy plus pass@1/pass@4 of 4 rollout-temperature samples
        p1, p4 = float(row["val/pass@1"]), float(row["val/pass@4"])
        assert 0.0 <= p1 <= p4 <= 1.0 and 0.0 <= float(row["val/accuracy"]) <= 1.0


def test_step_reductions_are_registered_and_bit_identical(tiny_policy_dir):
    from rlforge import RLTrainer

    trainer = RLTrainer(logger=False)
    rng = random.Random(0)
    losses = [rng.uniform(-3, 3) * 10 ** rng.randint(-8, 3) for _ in range(37)]
    for value in losses:
        trainer.log("train/loss", value)
    for name in ("reward/errors", "train/skipped_steps", "rollout/restarts", "rollout/dropped_stale"):
        trainer.log(name, 2.0)
        trainer.log(name, 3.0)
    trainer.log("custom/peak", 1.0, reduce="max")
    trainer.log("custom/peak", 4.0)
    trainer.log("train/loss_nan", float("nan"))
    metrics = trainer.metrics.flush(0)
    assert repr(metrics["train/loss"]) == repr(sum(losses) / len(losses))  # float64, in order: same bits
    assert metrics["reward/errors"] == metrics["rollout/restarts"] == metrics["rollout/dropped_stale"] == 5.0
    assert metrics["train/skipped_steps"] == 5.0 and metrics["custom/peak"] == 4.0
    assert math.isnan(metrics["train/loss_nan"])


# --------------------------------------------------------------------------------- case 22: quiet output
def test_math_verify_timeout_notice_not_shown(caplog):
    import math_verify.grader
    import math_verify.parser

    math_verify.grader.TIMEOUT_WARNING_SHOWN = False  # as in a fresh process
    math_verify.parser.TIMEOUT_WARNING_SHOWN = False
    with caplog.at_level(logging.WARNING):
        # a generous limit: this test is about the notice, not about the machine's load
        assert MathReward(math_verify_timeout_s=60.0)("q", r"\boxed{2x+2}", "2(x+1)") == 1.0
    assert not [r for r in caplog.records if "Timeout is disabled" in r.getMessage()]


def test_python_api_output_has_no_loading_bars(tiny_policy_dir, tmp_path):
    out, err = _run_isolated(
        f"""
        import sys
        from rlforge import GRPOModule, RLTrainer
        from rlforge.data import RLDataModule
        import transformers.utils.logging as hf_logging
        trainer = RLTrainer(max_steps=1, val_check_interval=0, enable_progress_bar=False,
                            enable_checkpointing=False, default_root_dir={str(tmp_path)!r})
        trainer.fit(GRPOModule(model={tiny_policy_dir!r}, group_size=2), RLDataModule(batch_size=2))
        assert hf_logging.is_progress_bar_enabled()  # the user's own setting is restored
        print("done")
        """,
        limit_s=240,
    )
    assert out.strip().endswith("done")
    assert "Loading weights" not in err and "it/s]" not in err, err[-2000:]
