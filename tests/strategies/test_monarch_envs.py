"""``MonarchStrategy(env=...)``: environments of multi-turn episodes in ``EnvActor`` processes.

The reference is ``LocalStrategy``, whose environments run in threads of the trainer (``LocalEnvRunner``).
The environments below live in this module: Monarch pickles the template with cloudpickle, by reference, and the
actor processes import this module (the driver's ``sys.path`` is theirs).
"""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

import pytest

pytest.importorskip("monarch", reason="MonarchStrategy tests need the `monarch` extra (in `dev`)")

from rlforge import GRPOModule, LocalStrategy, RLDataModule, RLTrainer, SamplingParams
from rlforge.cli import main as cli_main
from rlforge.envs import Environment, Observation, StepResult, episode_metrics, run_episodes
from rlforge.envs.encoding import ModuleTurnEncoder
from rlforge.errors import ConfigError, WorkerDiedError
from rlforge.strategies import MonarchStrategy, ServiceConfig
from rlforge.strategies.monarch.envs import RemoteEnvRunner
from tests.strategies.conftest import column, losses


class TwoTurnEnv(Environment):
    """A tool-like reply after the first turn (from the action and the seed); the second turn's reward from the action.

    Each ``reset`` leaves a file named after its process id in ``pid_dir`` (where the episode ran).
    """

    def __init__(self, pid_dir: str = "", **kwargs) -> None:
        super().__init__(**kwargs)
        self.pid_dir = pid_dir

    def reset(self, row, seed):
        self.turn, self.seed = 0, seed
        if self.pid_dir:
            Path(self.pid_dir, str(os.getpid())).touch()
        return Observation(row["prompt"])

    def step(self, action):
        self.turn += 1
        if self.turn == 1:
            return StepResult(Observation(f" {(len(action) + self.seed) % 7}:", role="tool"), info={"tool_calls": 1})
        reward = float(zlib.crc32(action.encode()) % 2)  # crc32, not hash(): the same in every process
        return StepResult(reward=reward, done=True, info={"success": reward > 0})


class FlakyEnv(Environment):
    """The row's prompt says what ``step`` does: ``raise``, ``hang`` (past ``timeout_s``) or end with reward 1.
    ``reset`` answers the prompt, or this process's id for ``pid``."""

    def reset(self, row, seed):
        self.prompt = row["prompt"]
        return Observation(str(os.getpid()) if self.prompt == "pid" else self.prompt)

    def step(self, action):
        if self.prompt == "raise":
            raise RuntimeError("boom")
        if self.prompt == "hang":
            time.sleep(60)
        return StepResult(reward=1.0, done=True, info={"success": True})


def _fit(root, strategy, environment):
    module = GRPOModule(group_size=3, sampling=SamplingParams(max_new_tokens=6), environment=environment)
    trainer = RLTrainer(
        max_steps=2,
        strategy=strategy,
        default_root_dir=str(root),
        enable_progress_bar=False,
        val_check_interval=2,
        seed=1,
    )
    trainer.fit(module, RLDataModule(batch_size=2, val_size=4))
    return trainer


@pytest.mark.slow
def test_env_workers_give_the_local_run(tmp_path):
    (tmp_path / "local_pids").mkdir()
    (tmp_path / "remote_pids").mkdir()
    _fit(tmp_path / "local", LocalStrategy(), TwoTurnEnv(str(tmp_path / "local_pids"), max_turns=3))
    strategy = MonarchStrategy(env=ServiceConfig(procs=2))
    _fit(tmp_path / "monarch", strategy, TwoTurnEnv(str(tmp_path / "remote_pids"), max_turns=3))
    # Episodes ran in the trainer for LocalStrategy, in two other processes (both used) for the env workers.
    assert {int(p.name) for p in (tmp_path / "local_pids").iterdir()} == {os.getpid()}
    remote_pids = {int(p.name) for p in (tmp_path / "remote_pids").iterdir()}
    assert len(remote_pids) == 2 and os.getpid() not in remote_pids
    # Same seed, same sampler stream, same environments: the same run (rollouts and greedy validation episodes).
    local, remote = tmp_path / "local", tmp_path / "monarch"
    names = ["rollout/reward_mean", "rollout/turns_mean", "rollout/tool_calls_mean", "rollout/episode_len"]
    for name in [*names, "env/errors", "val/accuracy"]:
        assert column(remote, name) == column(local, name), name
    assert column(local, "rollout/tool_calls_mean") == {1: 1.0, 2: 1.0}  # every episode took both turns
    assert losses(remote) == pytest.approx(losses(local), abs=1e-5)
    grad_norm = column(local, "train/grad_norm")
    assert grad_norm[1] > 0  # rewards differed within a group: a real update, the same on both
    assert column(remote, "train/grad_norm") == pytest.approx(grad_norm, abs=1e-4)
    assert strategy._replicas == []  # teardown stopped the env workers


@pytest.mark.slow
def test_env_worker_failures_end_only_their_episode_and_a_dead_worker_stops_the_run(tmp_path):
    module = GRPOModule(group_size=2, sampling=SamplingParams(max_new_tokens=3), environment=FlakyEnv(timeout_s=1.0))
    strategy = MonarchStrategy(env=ServiceConfig(procs=2))
    trainer = RLTrainer(strategy=strategy, logger=False, enable_progress_bar=False, default_root_dir=str(tmp_path))
    trainer.prepare(module, RLDataModule(batch_size=2), stage="validate")  # env workers only, no generator
    try:
        envs = trainer.services.envs
        assert isinstance(envs, RemoteEnvRunner) and len(envs.workers) == 2
        # Episode e lives on worker e % 2; answers come back in the caller's order whatever the shard.
        ids, prompts = [2, 7, 4, 9, 6], ["pid", "pid", "raise", "hang", "ok"]
        starts = envs.reset(ids, [{"prompt": p} for p in prompts], [0] * 5)
        even, odd = int(starts[0].observation.text), int(starts[1].observation.text)
        assert len({even, odd, os.getpid()}) == 3
        assert [s.observation.text for s in starts[2:]] == ["raise", "hang", "ok"]
        begin = time.monotonic()
        results = envs.step(ids, ["x"] * 5)
        assert time.monotonic() - begin < 10.0  # the hung call is abandoned after timeout_s, not waited for
        assert [r.reward for r in results] == [1.0, 1.0, 0.0, 0.0, 1.0]
        assert all(r.done for r in results)
        assert results[2].info["error"] == "step raised RuntimeError: boom"
        assert results[3].info["error"] == "step took longer than timeout_s=1"
        assert [("error" in r.info) for r in (results[0], results[1], results[4])] == [False] * 3
        envs.close(ids)

        # In the episode loop the failed episodes count in env/errors and score 0; the others are unaffected.
        rows = [{"prompt": p, "target": ""} for p in ("raise", "ok", "hang")]
        groups = run_episodes(
            rows, 2, trainer.services.sampler, envs, ModuleTurnEncoder(module), SamplingParams(max_new_tokens=3),
            [0, 1, 2],
        )  # fmt: skip
        logged = {name: value for name, (value, _) in episode_metrics(groups).items()}
        assert [[ep.reward for ep in g] for g in groups] == [[0.0, 0.0], [1.0, 1.0], [0.0, 0.0]]
        assert logged["env/errors"] == 4.0

        # A worker process that dies stops the run with one line naming the worker.
        os.kill(odd, signal.SIGKILL)
        with pytest.raises(WorkerDiedError) as info:
            envs.reset([1], [{"prompt": "ok"}], [0])
        message = str(info.value)
        assert "\n" not in message and message.startswith("env worker 1: reset: the worker process died")
    finally:
        strategy.teardown()


def test_env_workers_without_a_module_environment_are_a_one_line_config_error(tmp_path, capsys):
    flags = ["--trainer.max_steps", "1", "--trainer.default_root_dir", str(tmp_path)]
    strategy = ["--trainer.strategy", "rlforge.strategies.MonarchStrategy", "--trainer.strategy.env.procs", "2"]
    with pytest.raises(SystemExit) as info:
        cli_main(["fit", *flags, *strategy])
    assert info.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("rlforge: error: trainer.strategy.env places environment workers, but GRPOModule has no")
    too_slow = "module.environment.timeout_s=30 must be below trainer.strategy.timeout_s=10"
    with pytest.raises(ConfigError, match=too_slow):
        _fit(tmp_path / "t", MonarchStrategy(env=ServiceConfig(), timeout_s=10.0), TwoTurnEnv())
    unpicklable = TwoTurnEnv()
    unpicklable.lock = threading.Lock()
    with pytest.raises(ConfigError, match=r"module.environment \(TwoTurnEnv\) must pickle to run in env workers"):
        _fit(tmp_path / "p", MonarchStrategy(env=ServiceConfig()), unpicklable)
    with pytest.raises(ConfigError, match="trainer.strategy.env.procs must be >= 1"):
        MonarchStrategy(env=ServiceConfig(procs=0))


@pytest.mark.slow
def test_agent_tool_config_trains_with_env_actors_on_monarch(tmp_path):
    """Acceptance: `--trainer.strategy rlforge.strategies.MonarchStrategy` trains agent_tool.yaml with env actors."""
    repo = Path(__file__).resolve().parents[2]
    cmd = [
        sys.executable, "-m", "rlforge.cli", "fit", "--config", str(repo / "configs" / "agent_tool.yaml"),
        "--trainer.strategy", "rlforge.strategies.MonarchStrategy", "--trainer.strategy.env.procs", "2",
        "--trainer.max_steps", "3", "--trainer.val_check_interval", "0", "--trainer.enable_progress_bar", "false",
        "--trainer.default_root_dir", str(tmp_path), "--data.batch_size", "4", "--module.group_size", "4",
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(repo)}, capture_output=True,
                          text=True, timeout=900)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    (metrics,) = tmp_path.glob("rlforge/version_*/metrics.csv")
    rows = [r for r in csv.DictReader(open(metrics)) if r.get("rollout/turns_mean")]
    assert [int(r["step"]) for r in rows] == [1, 2, 3]
    assert all(float(r["env/errors"]) == 0 and float(r["rollout/tool_calls_mean"]) > 0 for r in rows)
    assert all(float(r["rollout/turns_mean"]) > 1 for r in rows)
