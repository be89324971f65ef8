"""The shipped agentic configs and policies: each config parses and trains, each alias loads its policy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from rlforge.cli import main
from rlforge.data.tasks import make_task
from rlforge.envs.guess import HIGHER, INVALID, LOWER
from rlforge.models.loading import AGENT_MULTITURN_POLICY, AGENT_TOOL_POLICY, load_policy, resolve_model_path
from tests.helpers import metric_rows

REPO = Path(__file__).resolve().parents[2]
OBSERVATIONS = {
    "tool_multiply": ["<tool_response>98901</tool_response>"],  # the largest product, 999 * 99
    "guess_number": [HIGHER, LOWER, INVALID],
}
CONFIGS = {"agent_tool.yaml": AGENT_TOOL_POLICY, "agent_multiturn.yaml": AGENT_MULTITURN_POLICY}


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_config_trains_two_steps_with_episode_metrics(config: str, tmp_path: Path) -> None:
    spec = yaml.safe_load((REPO / "configs" / config).read_text())
    assert spec["module"]["init_args"]["model"] == CONFIGS[config]
    flags = {
        "trainer.max_steps": 2,
        "trainer.default_root_dir": tmp_path,
        "trainer.enable_progress_bar": "false",
        "trainer.val_check_interval": 2,
        "trainer.enable_checkpointing": "false",
        "data.batch_size": 2,
        "data.val_size": 2,
        "module.group_size": 2,
    }
    args = ["fit", "--config", str(REPO / "configs" / config)]
    args += [item for key, value in flags.items() for item in (f"--{key}", str(value))]
    try:
        main(args)
    except SystemExit as exit_:
        assert not exit_.code, exit_.code
    rows = metric_rows(tmp_path)
    assert len(rows) == 2
    assert all(float(row["rollout/turns_mean"]) >= 1 for row in rows)
    assert all(float(row["rollout/tool_calls_mean"]) >= 0 for row in rows)
    assert [row for row in metric_rows(tmp_path, "val/accuracy")]  # validation ran on the environment


@pytest.mark.parametrize("alias", [AGENT_TOOL_POLICY, AGENT_MULTITURN_POLICY])
def test_alias_loads_the_shipped_policy(alias: str) -> None:
    folder = Path(resolve_model_path(alias))
    report = json.loads((folder / "warmstart.json").read_text())
    assert sum(f.stat().st_size for f in folder.iterdir()) < 10 * 2**20
    model, tokenizer = load_policy(alias)
    assert sum(p.numel() for p in model.parameters()) == report["num_parameters"]
    assert tokenizer.padding_side == "left" and model.config.eos_token_id == tokenizer.eos_token_id
    splits = make_task(report["task"], seed=report["seed"], **report["task_kwargs"])
    assert len(splits.val) == report["num_val_prompts"]
    # the longest well-formed episode fits the positions: prompt, max_turns turns, an observation between two turns
    longest_observation = max(len(tokenizer(text)["input_ids"]) for text in OBSERVATIONS[report["task"]])
    prompt = max(len(tokenizer(r["prompt"])["input_ids"]) for r in splits.train + splits.val)
    turns = report["max_turns"]
    episode = prompt + turns * report["max_new_tokens_per_turn"] + (turns - 1) * longest_observation
    assert episode <= model.config.max_position_embeddings
    assert 0.05 <= report["val_greedy_success"] <= 0.45 and report["val_sampled_t1_success"] > 0.05


@pytest.mark.slow
@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_validate_reproduces_the_warm_start_greedy_success(config: str, tmp_path: Path) -> None:
    # `rlforge validate` (GRPOModule's validation loop) on the whole held-out split against the number that
    # scripts/make_agent_policies.py measured with its own episode loop when it saved the policy
    from rlforge.cli import run

    report = json.loads((Path(resolve_model_path(CONFIGS[config])) / "warmstart.json").read_text())
    args = ["validate", "--config", str(REPO / "configs" / config), "--data.val_size", str(report["num_val_prompts"])]
    args += ["--trainer.default_root_dir", str(tmp_path), "--trainer.enable_progress_bar", "false"]
    metrics = run(args)
    assert metrics["val/accuracy"] == pytest.approx(report["val_greedy_success"], abs=1.01 / report["num_val_prompts"])
