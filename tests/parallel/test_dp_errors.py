"""A bad distributed setup is a one-line error naming the cause, never a hang."""

from __future__ import annotations

import subprocess
import sys
import time

from tests.helpers import fast_flags, free_port
from tests.parallel.dp_helpers import REPO, env, fit


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("rlforge: error:")]


def test_groups_that_do_not_split_over_the_ranks_are_a_config_error(tiny_policy_dir, tmp_path):
    proc = fit(fast_flags(tiny_policy_dir, tmp_path, data__batch_size=3), ranks=2, timeout=180)
    assert proc.returncode != 0
    lines = _error_lines(proc.stderr)
    assert lines and all("data.batch_size=3 cannot be split evenly over 2 ranks" in line for line in lines), lines
    assert not (tmp_path / "rlforge" / "version_1").exists()


def _rank(rank: int, port: int, flags: list[str]) -> subprocess.Popen:
    variables = {**env(), "RANK": str(rank), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    return subprocess.Popen(
        [sys.executable, "-m", "rlforge", "fit", *flags], cwd=REPO, env=variables, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip


def test_a_missing_rank_is_a_rendezvous_timeout(tiny_policy_dir, tmp_path):
    start = time.monotonic()
    alone = _rank(0, free_port(), [*fast_flags(tiny_policy_dir, tmp_path), "--trainer.dist_timeout_s", "3"])
    _, stderr = alone.communicate(timeout=120)
    assert alone.returncode == 2, stderr[-2000:]
    (line,) = _error_lines(stderr)
    assert "rank 0 of 2 (torchrun): no rendezvous with 127.0.0.1:" in line and "within 3 s" in line
    assert time.monotonic() - start < 60


def test_a_rank_that_dies_stops_the_others_with_one_line(tiny_policy_dir, tmp_path):
    """As under srun (no torchrun agent to kill the survivors): rank 1 dies in step 2; rank 0 must not hang."""
    port = free_port()
    flags = fast_flags(tiny_policy_dir, tmp_path, trainer__max_steps=4)
    flags += ["--trainer.dist_timeout_s", "20"]
    flags += ["--trainer.callbacks", "[{class_path: tests.parallel.kill_rank.KillRank, init_args: {rank: 1, step: 2}}]"]
    ranks = [_rank(r, port, flags) for r in (0, 1)]
    start = time.monotonic()
    _, stderr = ranks[0].communicate(timeout=240)
    ranks[1].communicate(timeout=30)
    assert ranks[1].returncode == -9
    assert ranks[0].returncode == 2, stderr[-3000:]
    (line,) = _error_lines(stderr)
    assert "rank 0 of 2:" in line and "another rank probably died" in line, line
    assert time.monotonic() - start < 200


LORA = "{class_path: peft.LoraConfig, init_args: {r: 4, lora_alpha: 8, target_modules: all-linear}}"


def test_a_lora_policy_on_several_ranks_says_it_trains_on_one_process(tiny_policy_dir, tmp_path):
    lora = fit([*fast_flags(tiny_policy_dir, tmp_path / "lora"), "--module.init_args.peft", LORA], ranks=2)
    assert lora.returncode != 0
    lines = _error_lines(lora.stderr)
    assert lines and all("a LoRA (PEFT) policy trains on one process; this run has 2 ranks" in x for x in lines)
