"""OpenEnvEnvironment against a real OpenEnv server (uvicorn + ``create_app``) and in-process."""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import rlforge
from rlforge.envs import LocalEnvRunner, OpenEnvEnvironment
from rlforge.errors import ConfigError, MissingDependencyError
from tests.helpers import free_port

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("openenv") is None, reason="openenv is not importable (`pip install 'rlforge[openenv]'`)"
)

ROOT = Path(__file__).resolve().parents[2]
TARGET_ENV = "tests.envs.openenv_target_env"
START_TIMEOUT_S = 90.0  # the server imports openenv (gradio included): ~10 s alone, more on a loaded machine


@contextlib.contextmanager
def serve(max_sessions: int = 32) -> Iterator[tuple[str, subprocess.Popen]]:
    """Serves the target environment with uvicorn on a free port; always stops it.

    The server's log goes to a file, not a pipe: nobody reads a pipe during the test, and a full one blocks the
    server (OpenEnv logs a traceback for every client that disconnects first).
    """
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "TARGET_ENV_MAX_SESSIONS": str(max_sessions)}
    cmd = [sys.executable, "-m", "uvicorn", f"{TARGET_ENV}:app", "--host", "127.0.0.1", "--port", str(port)]
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while not _healthy(url):
                if proc.poll() is not None:
                    log.seek(0)
                    raise RuntimeError(f"the OpenEnv server exited: {log.read().decode()[-2000:]}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the OpenEnv server was not ready within {START_TIMEOUT_S:g}s")
                time.sleep(0.2)
            yield url, proc
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as answer:
            return answer.status == 200
    except OSError:
        return False


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with serve() as (url, _):
        yield url


def _episodes(runner: LocalEnvRunner, rows: list[dict], seeds: list[int], actions: list[str]):
    ids = list(range(len(rows)))
    starts = runner.reset(ids, rows, seeds)
    steps = runner.step(ids, actions)
    runner.close(ids)
    return starts, steps


def test_adapter_against_server_concurrent_episodes(server: str) -> None:
    """Eight episodes at once, each on its own session: prompt, reward, done, success and multi-turn text."""
    template = OpenEnvEnvironment(base_url=server, max_turns=2, timeout_s=30)
    copy.deepcopy(template)  # the template holds no connection
    runner = LocalEnvRunner(template)
    # action_field guessed from the server's /schema ("text", the action's only str field)
    rows = [{"prompt": "p", "target": str(i)} for i in range(8)]
    actions = [f"it is {i}" if i % 2 == 0 else "no idea" for i in range(8)]
    starts, steps = _episodes(runner, rows, [0] * 8, actions)
    assert [s.observation.text for s in starts] == ["Say a number:"] * 8
    assert all("error" not in s.info for s in starts + steps), [s.info for s in starts + steps]
    for i, result in enumerate(steps):
        hit = i % 2 == 0
        assert result.reward == float(hit) and result.done is hit
        assert result.info["success"] is hit  # an observation field: the server drops metadata
        assert (result.observation is None) if hit else (result.observation.text == "Wrong, try again:")
    assert runner._envs == {}


def test_seed_reaches_reset_when_the_row_has_no_target(server: str) -> None:
    runner = LocalEnvRunner(OpenEnvEnvironment(base_url=server, action_field="text", reset_fields=[]))
    _, steps = _episodes(runner, [{"target": "7"}, {"target": "7"}], [13, 14], ["3", "3"])
    assert [s.reward for s in steps] == [1.0, 0.0]  # target not passed (reset_fields=[]): digit = seed % 10


def test_typed_client_class(server: str) -> None:
    """client_class: the Action type comes from the client's type parameters; observations are typed models."""
    env = OpenEnvEnvironment(base_url=server, client_class=f"{TARGET_ENV}.GuessClient")
    assert env._action_spec[1] == "text" and env._action_spec[0].__name__ == "GuessAction"
    starts, steps = _episodes(LocalEnvRunner(env), [{"target": "4"}, {"target": "4"}], [0, 0], ["4", "x"])
    assert [s.observation.text for s in starts] == ["Say a number:"] * 2
    assert [(r.reward, r.done, r.info["success"]) for r in steps] == [(1.0, True, True), (0.0, False, False)]
    assert steps[1].observation.text == "Wrong, try again:"


def test_in_process_env_class() -> None:
    """env_class mode: the Action type comes from ``step``'s annotation, metadata reaches info."""
    env = OpenEnvEnvironment(env_class=f"{TARGET_ENV}.TargetEnvironment", env_kwargs={"tries": 3}, max_turns=3)
    assert env._action_spec[1] == "text" and env._action_spec[0].__name__ == "GuessAction"
    runner = LocalEnvRunner(env)
    starts = runner.reset([0, 1], [{"target": "15"}, {"target": "15", "unused": 1}], [0, 0])
    assert [s.observation.text for s in starts] == ["Say a number:"] * 2
    first = runner.step([0, 1], ["4", "5"])
    assert [(r.reward, r.done) for r in first] == [(0.0, False), (1.0, True)]
    assert first[1].info == {"success": True, "seconds": first[1].info["seconds"]}
    runner.close([1])
    second = runner.step([0], ["55"])
    assert (second[0].reward, second[0].done, second[0].info["success"]) == (1.0, True, True)
    runner.close([0])


def test_config_errors_name_the_field() -> None:
    with pytest.raises(ConfigError, match="exactly one of base_url"):
        OpenEnvEnvironment()
    with pytest.raises(ConfigError, match=r"module\.environment\.env_class: cannot import"):
        OpenEnvEnvironment(env_class="tests.envs.no_such_module.Env")
    with pytest.raises(ConfigError, match=r"module\.environment\.action_field: GuessAction has no field 'msg'"):
        OpenEnvEnvironment(env_class=f"{TARGET_ENV}.TargetEnvironment", action_field="msg")


def test_missing_extra_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import rlforge.imports as imports

    missing = imports.RequirementCache("openenv-core-not-installed", module="openenv_core_not_installed")
    monkeypatch.setitem(imports._EXTRAS, "openenv", (missing, *imports._EXTRAS["openenv"][1:]))
    with pytest.raises(MissingDependencyError, match=r"pip install 'rlforge\[openenv\]'") as err:
        OpenEnvEnvironment(base_url="http://127.0.0.1:1")
    assert "\n" not in str(err.value)


def test_unreachable_server_fails_each_episode_at_reset() -> None:
    """No server: every episode ends at reset with an error naming the URL (counted in env/errors)."""
    url = f"http://127.0.0.1:{free_port()}"
    runner = LocalEnvRunner(OpenEnvEnvironment(base_url=url, action_field="text", timeout_s=10))
    starts = runner.reset([0, 1], [{}, {}], [0, 0])
    for start in starts:
        assert start.done and start.observation is None
        assert f"OpenEnv server {url}: reset failed" in start.info["error"]
    runner.close([0, 1])


def test_server_sessions_at_capacity_and_after_a_timed_out_reset() -> None:
    """A server allowing 2 sessions: 2 of 4 episodes start, the others fail naming max_concurrent_envs; a reset
    past timeout_s gives its session back once the server finishes it."""
    with serve(max_sessions=2) as (url, _):
        runner = LocalEnvRunner(OpenEnvEnvironment(base_url=url, action_field="text"))
        starts = runner.reset([0, 1, 2, 3], [{}] * 4, [0] * 4)
        runner.close([0, 1, 2, 3])
        impatient = LocalEnvRunner(OpenEnvEnvironment(base_url=url, action_field="text", timeout_s=0.5))
        (slow,) = impatient.reset([4], [{"reset_delay_s": 1.0}], [0])
        impatient.close([4])
        time.sleep(2.5)  # the server finishes the slow reset and drops the session of the closed connection
        again = runner.reset([5, 6], [{}, {}], [0, 0])
        runner.close([5, 6])
    errors = [s.info["error"] for s in starts if "error" in s.info]
    assert sum(s.observation is not None for s in starts) == 2 and len(errors) == 2
    assert all(
        "may be at capacity" in e and "max_concurrent_envs=<at least batch_size * group_size>" in e for e in errors
    )
    # Either the runner's limit or the client's own (the same 0.5 s) fires first: both end the episode.
    assert any(s in slow.info["error"] for s in ("took longer than timeout_s=0.5", "no answer within 0.5s"))
    assert [s.observation.text for s in again] == ["Say a number:"] * 2, [s.info for s in again]


def _fit(url: str, max_steps: int, callbacks: list | None = None, **trainer_kwargs) -> dict[int, dict[str, float]]:
    """Fits the default policy on the target environment; returns each step's logged metrics."""
    seen: dict[int, dict[str, float]] = {}

    class Record(rlforge.Callback):
        def on_train_step_end(self, trainer, module, metrics) -> None:
            seen[trainer.global_step] = dict(metrics)

    torch.manual_seed(0)
    env = OpenEnvEnvironment(base_url=url, action_field="text", max_turns=2, timeout_s=20)
    module = rlforge.GRPOModule(group_size=3, sampling=rlforge.SamplingParams(max_new_tokens=4), environment=env)
    trainer = rlforge.RLTrainer(
        max_steps=max_steps, enable_progress_bar=False, callbacks=[Record(), *(callbacks or [])], **trainer_kwargs
    )
    trainer.fit(module, rlforge.RLDataModule(batch_size=2, val_size=2))
    return seen


def test_grpo_trains_against_server(server: str, tmp_path: Path) -> None:
    seen = _fit(server, 3, default_root_dir=str(tmp_path), val_check_interval=3)
    assert sorted(seen) == [1, 2, 3]
    for metrics in seen.values():
        assert metrics["env/errors"] == 0
        for name in ("train/loss", "rollout/turns_mean", "env/step_s", "rollout/episode_len"):
            assert name in metrics and metrics[name] == metrics[name], (name, metrics)
        assert 1 <= metrics["rollout/turns_mean"] <= 2
    assert "val/accuracy" in seen[3]


def test_server_dying_mid_run_ends_episodes_not_the_run(tmp_path: Path) -> None:
    """The server is killed after step 1: step 2's episodes fail at reset (env/errors = 6), the run finishes."""
    with serve() as (url, proc):

        class KillServer(rlforge.Callback):
            def on_train_step_end(self, trainer, module, metrics) -> None:
                if trainer.global_step == 1:
                    proc.kill()
                    proc.wait(10)

        seen = _fit(url, 2, [KillServer()], default_root_dir=str(tmp_path), val_check_interval=0)
    assert seen[1]["env/errors"] == 0
    assert seen[2]["env/errors"] == 6  # batch 2 x group 3, each counted once
    assert "train/loss" in seen[2]


def test_reset_finishing_after_its_timeout_leaves_nothing_open() -> None:
    """The runner abandons a reset past timeout_s and closes the episode; the late reset must not leak."""
    from tests.envs import openenv_target_env as target

    env_class = f"{TARGET_ENV}.TargetEnvironment"
    runner = LocalEnvRunner(OpenEnvEnvironment(env_class=env_class, env_kwargs={"init_delay_s": 1.0}, timeout_s=0.3))
    (start,) = runner.reset([0], [{}], [0])
    assert "took longer than timeout_s=0.3" in start.info["error"]
    runner.close([0])
    before = set(target.OPEN)
    time.sleep(1.5)  # the abandoned reset finishes now
    assert target.OPEN == before
