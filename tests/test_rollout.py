"""``RolloutEngine``: async prefetch and its resume, the staleness check, and the batch it hands the update."""

from __future__ import annotations

import threading

import pytest
import torch

from rlforge import Callback, GRPOModule, LocalStrategy, RLDataModule, RLTrainer, WeightSync
from rlforge.errors import ConfigError
from rlforge.losses import GRPOLoss
from tests.helpers import char_reward


def _prepared(policy: str, tmp_path, strategy: LocalStrategy, callbacks=(), **module_kwargs) -> RLTrainer:
    module = GRPOModule(model=policy, group_size=3, reward_fns=[char_reward], **module_kwargs)
    trainer = RLTrainer(
        max_steps=4, strategy=strategy, default_root_dir=str(tmp_path), enable_progress_bar=False, logger=False,
        callbacks=list(callbacks), seed=2,
    )  # fmt: skip
    trainer.prepare(module, RLDataModule(batch_size=2))
    return trainer


def test_async_engine_prefetches_the_next_rows_and_a_resumed_engine_samples_them_first(tiny_policy_dir, tmp_path):
    trainer = _prepared(tiny_policy_dir, tmp_path, LocalStrategy(device="cpu", max_staleness=1))
    engine, datamodule = trainer.rollout, trainer.datamodule
    groups, batch = engine.next(0)
    assert len(groups) == 2 and len(batch) == 6
    state = engine.state_dict(policy_version=0)
    (pending,) = state["pending_rows"]  # step 2's rows were submitted while step 1 is about to train
    assert [row["prompt"] for row in pending] == [g[0].prompt for g in _prepared_rows(tiny_policy_dir, tmp_path, 1)]
    assert datamodule.state_dict()["index"] == 4

    fresh = _prepared(tiny_policy_dir, tmp_path / "b", LocalStrategy(device="cpu", max_staleness=1))
    fresh.rollout.load_state_dict(state)
    groups, _ = fresh.rollout.next(1)
    assert [g[0].prompt for g in groups] == [row["prompt"] for row in pending]
    assert fresh.datamodule.state_dict()["index"] == 2  # the pending rows came first; then the next prefetch


def _prepared_rows(policy: str, tmp_path, step: int):
    """The groups a synchronous engine samples at ``step`` (same data order)."""
    trainer = _prepared(policy, tmp_path / f"sync{step}", LocalStrategy(device="cpu"))
    for k in range(step + 1):
        groups, _ = trainer.rollout.next(k)
    return groups


def test_sync_interval_longer_than_the_staleness_allows_is_a_config_error(tiny_policy_dir, tmp_path):
    with pytest.raises(ConfigError, match="max_staleness=1 with WeightSync.sync_interval=3 would drop every rollout"):
        _prepared(tiny_policy_dir, tmp_path, LocalStrategy(max_staleness=1), callbacks=[WeightSync(sync_interval=3)])


def test_batch_carries_advantages_ref_logprobs_and_the_filtered_mask(tiny_policy_dir, tmp_path):
    strategy = LocalStrategy(device="cpu")
    trainer = _prepared(tiny_policy_dir, tmp_path, strategy, loss=GRPOLoss(beta=0.1), filter_truncated=True)
    groups, batch = trainer.rollout.next(0)
    episodes = [ep for g in groups for ep in g]
    assert torch.equal(batch.advantages, torch.tensor([ep.advantage for ep in episodes], dtype=torch.float32))
    for row, ep in zip(batch.response_mask, episodes, strict=True):  # truncated responses get no loss
        assert float(row.sum()) == (0 if ep.completion.truncated else len(ep.completion.token_ids))
    assert batch.ref_logprobs is not None and all(ep.ref_logprobs is not None for ep in episodes)


class _OverlapProbe(GRPOModule):
    """Records, for every scoring after the first, whether it ran while an update was in progress.

    ``training_step`` opens a window (``updating``) and waits for the next step's scoring to land in it; with no
    overlap that scoring only starts after the update, so both waits time out and the flag is False.
    """

    def __init__(self, *args, max_steps: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.max_steps, self.overlapped, self.calls = max_steps, [], 0
        self.updating, self.scored = threading.Event(), threading.Event()
        self.threads: set[str] = set()

    def score(self, groups, scorer=None):
        self.threads.add(threading.current_thread().name)
        if self.calls:
            self.overlapped.append(self.updating.wait(timeout=5))
        self.calls += 1
        metrics = super().score(groups, scorer)
        self.scored.set()
        return metrics

    def training_step(self, batch):
        self.scored.clear()
        self.updating.set()
        if self.calls < self.max_steps:  # another step follows: its request is scored during this update
            self.scored.wait(timeout=5)
        self.updating.clear()
        return super().training_step(batch)


def test_async_rollouts_are_scored_during_the_previous_update(tiny_policy_dir, tmp_path):
    module = _OverlapProbe(model=tiny_policy_dir, group_size=3, reward_fns=[char_reward], max_steps=3)
    seen = []
    trainer = RLTrainer(
        max_steps=3, strategy=LocalStrategy(device="cpu", max_staleness=1), default_root_dir=str(tmp_path),
        enable_progress_bar=False, logger=False, seed=2, callbacks=[_Recorder(seen)],
    )  # fmt: skip
    trainer.fit(module, RLDataModule(batch_size=2))
    assert module.overlapped == [True, True]  # steps 2 and 3 were scored while steps 1 and 2 trained
    assert module.threads == {"rlforge-score-ahead"}  # the main thread never waited on a reward
    episodes = [ep for groups in seen for group in groups for ep in group]
    assert len(episodes) == 3 * 2 * 3
    for ep in episodes:  # the same scores as scoring in the main thread
        assert ep.reward == char_reward(ep.prompt, ep.completion.text, ep.target)


class _Recorder(Callback):
    def __init__(self, seen: list) -> None:
        self.seen = seen

    def on_rollout_end(self, trainer, module, groups) -> None:
        self.seen.append(groups)


class _FailingScore(GRPOModule):
    def score(self, groups, scorer=None):
        if getattr(self, "scored_once", False):
            raise RuntimeError("reward service down")
        self.scored_once = True
        return super().score(groups, scorer)


def test_an_error_while_scoring_ahead_is_raised_in_the_training_loop(tiny_policy_dir, tmp_path):
    module = _FailingScore(model=tiny_policy_dir, group_size=3, reward_fns=[char_reward])
    trainer = RLTrainer(
        max_steps=3, strategy=LocalStrategy(device="cpu", max_staleness=1), default_root_dir=str(tmp_path),
        enable_progress_bar=False, logger=False, seed=2,
    )  # fmt: skip
    with pytest.raises(RuntimeError, match="reward service down"):
        trainer.fit(module, RLDataModule(batch_size=2))
    assert trainer.global_step == 1  # step 1 trained; step 2's scores never arrived
