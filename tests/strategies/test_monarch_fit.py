"""MonarchStrategy end to end: same curve as LocalStrategy, async rollouts, killed generators, several hosts."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

pytest.importorskip("monarch", reason="MonarchStrategy tests need the `monarch` extra (in `dev`)")

from rlforge import Callback, GRPOModule, LocalStrategy, ModelCheckpoint, RLDataModule, RLTrainer, WeightSync
from rlforge.cli import main as cli_main
from rlforge.errors import ConfigError, WorkerDiedError
from rlforge.strategies import MonarchStrategy, ServiceConfig
from tests.helpers import fast_flags, metric_rows
from tests.strategies.conftest import column, losses


def _fit(root, strategy, max_steps=6, callbacks=(), val=0, batch_size=4, ckpt_path=None, **module_kwargs):
    module = GRPOModule(group_size=4, **module_kwargs)
    trainer = RLTrainer(
        max_steps=max_steps,
        strategy=strategy,
        default_root_dir=str(root),
        enable_progress_bar=False,
        val_check_interval=val,
        val_at_start=bool(val),
        callbacks=list(callbacks),
        seed=1,
    )
    trainer.fit(module, RLDataModule(batch_size=batch_size, val_size=24), ckpt_path=ckpt_path)
    return trainer


def test_local_and_monarch_sync_give_the_same_learning_curve(tmp_path):
    _fit(tmp_path / "local", LocalStrategy(), max_steps=4, val=2)
    _fit(tmp_path / "monarch", MonarchStrategy(), max_steps=4, val=2)
    local, remote = losses(tmp_path / "local"), losses(tmp_path / "monarch")
    assert set(local) == set(range(1, 5)) and any(v != 0 for v in local.values())
    # Same seed, same sampler stream (replica 0 is seeded like LocalStrategy's generator): identical up to fp noise.
    assert remote == pytest.approx(local, abs=1e-5)
    assert column(tmp_path / "monarch", "rollout/reward_mean") == column(tmp_path / "local", "rollout/reward_mean")
    assert column(tmp_path / "monarch", "val/accuracy") == column(tmp_path / "local", "val/accuracy")
    assert column(tmp_path / "monarch", "rollout/staleness") == {s: 0.0 for s in range(1, 5)}


def test_async_rollouts_are_one_version_stale_and_importance_corrected(tmp_path):
    trainer = _fit(tmp_path, MonarchStrategy(max_staleness=1), max_steps=4)
    # One RolloutEngine for every strategy: LocalStrategy with the same max_staleness samples the same stale rollouts
    # (without the overlap) and gives the same curve.
    _fit(tmp_path / "local", LocalStrategy(max_staleness=1), max_steps=4)
    assert losses(tmp_path) == pytest.approx(losses(tmp_path / "local"), abs=1e-5)
    assert column(tmp_path / "local", "rollout/staleness") == {1: 0.0, 2: 1.0, 3: 1.0, 4: 1.0}
    staleness = column(tmp_path, "rollout/staleness")
    assert staleness == {1: 0.0, 2: 1.0, 3: 1.0, 4: 1.0}  # step k+1 was sampled while step k trained
    ratio_max = column(tmp_path, "train/is_ratio_max")
    assert set(ratio_max) == {1, 2, 3, 4} and all(v > 0 for v in ratio_max.values())
    assert column(tmp_path, "rollout/dropped_stale") == {s: 0.0 for s in range(1, 5)}
    assert trainer.datamodule.state_dict()["index"] == 4 * 4  # no prefetch after the last step


def test_rollouts_older_than_max_staleness_are_dropped_and_counted(tmp_path):
    # Syncing every 2 steps makes step 3's prefetched rollout 2 versions old: dropped, resampled fresh.
    _fit(tmp_path, MonarchStrategy(max_staleness=1), max_steps=4, callbacks=[WeightSync(sync_interval=2)])
    dropped = column(tmp_path, "rollout/dropped_stale")
    assert dropped[3] == 4.0 and dropped[2] == 0.0
    assert column(tmp_path, "rollout/staleness")[3] == 0.0  # the fresh batch used the synced weights
    with pytest.raises(ConfigError, match="max_staleness=1 with WeightSync.sync_interval=3"):
        _fit(tmp_path / "bad", MonarchStrategy(max_staleness=1), callbacks=[WeightSync(sync_interval=3)])


class _KillGenerator(Callback):
    """Kills generator replica 0 with SIGKILL at the end of step ``at_step``; records times."""

    def __init__(self, at_step: int) -> None:
        self.at_step, self.killed_at, self.step_times = at_step, None, {}

    def on_train_step_end(self, trainer, module, metrics):
        self.step_times[trainer.global_step] = time.monotonic()
        if trainer.global_step == self.at_step:
            (pid, *_) = trainer.strategy.generator_pids()
            os.kill(pid, signal.SIGKILL)
            self.killed_at = time.monotonic()


def test_killed_generator_is_respawned_with_current_weights(tmp_path, monkeypatch):
    from rlforge.strategies.monarch.generators import RemoteGenerator

    killer = _KillGenerator(at_step=2)
    strategy = MonarchStrategy(restart_on_failure=True)
    noticed = []
    respawn = RemoteGenerator.respawn
    monkeypatch.setattr(
        RemoteGenerator, "respawn", lambda self, index: (noticed.append(time.monotonic()), respawn(self, index))
    )
    trainer = _fit(tmp_path, strategy, max_steps=4, callbacks=[killer])
    assert trainer.global_step == 4
    # The death is noticed within seconds (respawning then costs a process start: seconds on a quiet host).
    (noticed_at,) = noticed
    assert noticed_at - killer.killed_at < 15.0
    # Step 3's rollout hit the dead replica and was re-sent to the new one, which holds the newest weights.
    assert column(tmp_path, "rollout/restarts") == {3: 1.0}
    assert column(tmp_path, "rollout/staleness")[3] == 0.0


def test_killed_generator_without_restart_stops_with_a_checkpoint_and_one_line_cause(tmp_path, caplog):
    killer = _KillGenerator(at_step=2)
    start = None
    with pytest.raises(WorkerDiedError) as info:
        start = time.monotonic()
        _fit(tmp_path, MonarchStrategy(), max_steps=5, callbacks=[killer, ModelCheckpoint(every_n_steps=0)])
    assert time.monotonic() - killer.killed_at < 15.0 and start is not None
    message = str(info.value)
    assert "\n" not in message and "died" in message and "Killed(sig=9)" in message
    # The trainer's on_exception path (ModelCheckpoint) saved the last completed step and said so in one line.
    (saved,) = [r.getMessage() for r in caplog.records if "saved to" in r.getMessage()]
    assert "WorkerDiedError" in saved and "state after step 2" in saved and "--ckpt_path last" in saved
    pointer = json.loads((tmp_path / "rlforge" / "version_0" / "checkpoints" / "last.json").read_text())
    assert pointer["step"] == 2  # nothing trained is lost
    # Resuming finishes the run; the rollout rows the dead replica never answered come first.
    trainer = _fit(tmp_path, MonarchStrategy(), max_steps=3, ckpt_path="last")
    assert trainer.global_step == 3 and trainer.progress.rollouts == 3
    with open(trainer.log_dir / "metrics.csv") as f:
        steps = [line.split(",")[0] for line in f.read().splitlines()[1:]]
    assert steps[-1] == "3" and "1" in steps  # history restored from the checkpoint, then step 3


def test_generators_on_several_simulated_hosts(tmp_path):
    from monarch.job import ProcessJob

    job = ProcessJob({"gen": 2})  # two "hosts": local worker processes with their own host agents
    try:
        strategy = MonarchStrategy(job=job, generator=ServiceConfig(num_replicas=2, hosts="gen"))
        parents = {}

        class _Where(Callback):
            def on_train_start(self, trainer, module):
                for pid in trainer.strategy.generator_pids():
                    with open(f"/proc/{pid}/status") as f:
                        parents[pid] = next(int(line.split()[1]) for line in f if line.startswith("PPid:"))

        trainer = _fit(tmp_path, strategy, max_steps=2, callbacks=[_Where()])
        assert trainer.global_step == 2
        assert len(parents) == 2 and len(set(parents.values())) == 2 and os.getpid() not in parents.values()
    finally:
        job.kill()


def test_cli_fit_with_the_monarch_strategy(tiny_policy_dir, tmp_path):
    cli_main(
        ["fit", *fast_flags(tiny_policy_dir, tmp_path), "--trainer.strategy", "rlforge.strategies.MonarchStrategy"]
    )
    rows = metric_rows(tmp_path)
    assert [int(r["step"]) for r in rows] == [1, 2]
    assert all(float(r["perf/sync_s"]) > 0 for r in rows)
