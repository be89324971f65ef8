"""Metrics of a 2-rank run count what happened once: a step every rank skips is one skipped step, not two."""

from __future__ import annotations

from tests.helpers import fast_flags
from tests.parallel.dp_helpers import fit, only_run, step_rows


def test_a_step_skipped_on_every_rank_counts_once(tiny_policy_dir, tmp_path):
    flags = fast_flags(tiny_policy_dir, tmp_path, trainer__max_steps=3, trainer__max_consecutive_skips=5)
    flags += ["--module.loss", "tests.callbacks.test_checkpoint_crash.NaNFromCall", "--module.loss.start", "2"]
    proc = fit(flags, ranks=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = step_rows(only_run(tmp_path))
    assert [rows[s].get("train/skipped_steps") or "" for s in (1, 2, 3)] == ["", "1.0", "1.0"]
