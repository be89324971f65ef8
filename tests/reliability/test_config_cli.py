"""Reliability of the config/CLI layer: class defaults, rejected values, no code run by configs, env, no abbreviation.

CLI cases run the real command (``python -m rlforge.cli``) in a subprocess; the matrices parse in-process with the
same parser. Expected values come from independent references (``inspect.signature``, hand computation).
"""

from __future__ import annotations

import inspect
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

import rlforge.losses
from examples.custom_loss import ClippedPGWithKL
from examples.seed_loss import CustomLoss
from rlforge import GRPOModule, RLTrainer
from rlforge.cli import build_parser, run
from rlforge.data import RLDataModule
from rlforge.errors import ConfigError
from rlforge.generation import SamplingParams
from tests.helpers import char_reward, fast_flags, metric_rows

REPO = Path(__file__).resolve().parents[2]
LOSSES = ["GRPOLoss", "DrGRPOLoss", "DAPOLoss", "CISPOLoss", "GSPOLoss", "SAPOLoss", "ReinforceLoss", "SimpleGRPOLoss"]


def _cli(*args: str, env: dict[str, str] | None = None, cwd: Path = REPO) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "rlforge.cli", *args], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=300
    )


def _one_line_error(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("rlforge: error:")]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def _signature_defaults(cls: type) -> dict[str, object]:
    return {name: p.default for name, p in inspect.signature(cls).parameters.items()}


def _parsed_loss(args: list[str]) -> tuple[str, dict[str, object]]:
    loss = build_parser().parse_args(["fit", *args]).fit.module.init_args.loss
    return loss.class_path, dict(loss.init_args.items()) if loss.get("init_args") else {}


# ----------------------------------------------------------------- case 1: a selected class gets its own defaults
@pytest.mark.parametrize("name", [*LOSSES, "examples.custom_loss.ClippedPGWithKL"])
def test_selected_loss_gets_its_own_defaults(name, tmp_path):
    cls = ClippedPGWithKL if "." in name else getattr(rlforge.losses, name)
    class_path = name if "." in name else f"rlforge.losses.{name}"
    yaml_file = tmp_path / "loss.yaml"
    yaml_file.write_text(yaml.safe_dump({"module": {"init_args": {"loss": {"class_path": class_path}}}}))
    expected = _signature_defaults(cls)
    for args in (["--module.loss.class_path", class_path], ["--module.loss", name], ["--config", str(yaml_file)]):
        assert _parsed_loss(args)[1] == expected, args


def test_explicit_init_args_still_override(tmp_path):
    assert _parsed_loss(["--module.loss", "DAPOLoss", "--module.loss.clip_high", "0.3"])[1]["clip_high"] == 0.3
    yaml_file = tmp_path / "cispo.yaml"
    spec = {"class_path": "rlforge.losses.CISPOLoss", "init_args": {"clip_high": 2.0}}
    yaml_file.write_text(yaml.safe_dump({"module": {"init_args": {"loss": spec}}}))
    assert _parsed_loss(["--config", str(yaml_file)])[1]["clip_high"] == 2.0
    # A value the user set before switching class is theirs, not a default: it is still carried.
    args = ["--module.loss.init_args.beta", "0.05", "--module.loss", "SimpleGRPOLoss"]
    assert _parsed_loss(args)[1]["beta"] == 0.05


def test_selected_module_class_gets_its_own_defaults():
    """Not only losses: switching the module class drops GRPOModule's defaults (SFTModule's warm-up is its own)."""
    from rlforge.sft import SFTModule

    module = build_parser().parse_args(["fit", "--module", "rlforge.SFTModule"]).fit.module
    sft, grpo = _signature_defaults(SFTModule), _signature_defaults(GRPOModule)
    assert module.init_args.warmup_steps == sft["warmup_steps"] != grpo["warmup_steps"]


def test_print_config_shows_the_selected_loss_defaults():
    result = _cli("fit", "--module.loss.class_path", "rlforge.losses.DAPOLoss", "--print_config")
    assert result.returncode == 0, result.stderr
    loss = yaml.safe_load(result.stdout)["module"]["init_args"]["loss"]
    assert loss["init_args"] == _signature_defaults(rlforge.losses.DAPOLoss)


# ------------------------------------------------------------------------------- case 3: grad_clip must be > 0
def test_negative_grad_clip_is_rejected(tmp_path):
    for bad in (-1.0, 0.0, float("nan")):
        with pytest.raises(ConfigError, match="trainer.grad_clip"):
            RLTrainer(grad_clip=bad)
    assert RLTrainer(grad_clip=None).grad_clip is None
    line = _one_line_error(_cli("fit", "--trainer.grad_clip", "-1", "--trainer.default_root_dir", str(tmp_path)))
    assert "trainer.grad_clip" in line


# ---------------------------------------------------------------- case 8: a plain nn.Module loss (the seed's)
def test_seed_loss_value_matches_hand_computation():
    from rlforge.losses.call import call_loss

    logprobs = [[-1.0, -2.0, -0.5], [-0.3, -1.2, -2.2]]
    ref = [[-1.5, -1.0, -0.5], [-0.4, -1.0, -1.0]]
    mask = [[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]
    adv = [0.5, -1.0]  # per sequence, as the trainer collates them ([B]); B != T catches a wrong broadcast
    total, count = 0.0, 0.0
    for b in range(2):
        for t in range(3):
            ratio = math.exp(logprobs[b][t] - ref[b][t])
            clipped = min(max(ratio, 0.8), 1.2)
            pg = -min(ratio * adv[b], clipped * adv[b])
            total += (pg + 0.1 * (ref[b][t] - logprobs[b][t])) * mask[b][t]
            count += mask[b][t]
    got = call_loss(
        CustomLoss(), torch.tensor(logprobs), torch.tensor(ref), torch.tensor(adv), torch.tensor(mask), None
    )
    assert got.item() == pytest.approx(total / count, rel=1e-6)


def test_seed_loss_trains_from_yaml(tiny_policy_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    run(["fit", "--config", "configs/seed_custom_loss.yaml", *fast_flags(tiny_policy_dir, tmp_path)])
    losses = [float(row["train/loss"]) for row in metric_rows(tmp_path)]
    assert len(losses) == 2 and all(math.isfinite(v) for v in losses)


def test_seed_loss_trains_from_python(tiny_policy_dir, tmp_path):
    seen: list[tuple[torch.Tensor | None, tuple[int, ...]]] = []

    class Recording(CustomLoss):
        def forward(self, logprobs, ref_logprobs, advantages, padding_mask):
            seen.append((ref_logprobs, tuple(advantages.shape)))
            return super().forward(logprobs, ref_logprobs, advantages, padding_mask)

    module = GRPOModule(
        model=tiny_policy_dir,
        loss=Recording(),
        group_size=3,
        sampling=SamplingParams(max_new_tokens=5),
        reward_fns=[char_reward],
    )
    trainer = RLTrainer(max_steps=2, default_root_dir=str(tmp_path), val_check_interval=0, enable_progress_bar=False)
    trainer.fit(module, RLDataModule(batch_size=2))
    assert len(metric_rows(tmp_path)) == 2
    assert seen and all(ref is not None and torch.isfinite(ref).all() for ref, _ in seen)
    assert all(shape == (6, 1) for _, shape in seen)  # 2 prompts x 3 samples, one advantage per sequence


def test_loss_without_the_contract_is_one_config_error():
    with pytest.raises(ConfigError, match="module.loss"):
        GRPOModule(loss=torch.nn.Linear(2, 2))
    line = _one_line_error(_cli("fit", "--module.loss", "torch.nn.Linear", "--print_config"))
    assert "module.loss" in line and "protocol LossModule" in line


# -------------------------------------------------------------------------- case 10: configs cannot run code
def test_os_system_reward_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"
    config = tmp_path / "evil.yaml"
    payload = {"class_path": "os.system", "init_args": {"command": f"touch {marker}"}}
    config.write_text(yaml.safe_dump({"module": {"init_args": {"reward_fns": [payload]}}}))
    result = _cli("fit", "--config", str(config), "--trainer.default_root_dir", str(tmp_path / "r"))
    assert not marker.exists()
    assert "module.reward_fns" in _one_line_error(result)


def test_rewards_are_reward_classes_or_functions():
    parser = build_parser()
    reward_fns = '["tests.helpers.char_reward", {"class_path": "rlforge.rewards.MathReward"}]'
    init = parser.instantiate(parser.parse_args(["fit", "--module.reward_fns", reward_fns])).fit
    fns = init.module.reward_runner.reward_fns
    assert fns[0] is char_reward and type(fns[1]).__name__ == "MathReward"
    for bad in ('["os.system"]', '["builtins.print"]', '[{"class_path": "collections.OrderedDict"}]'):
        with pytest.raises(Exception, match="reward_fns"):
            parser.parse_args(["fit", "--module.reward_fns", bad])


def test_a_function_named_by_class_path_is_never_called(tmp_path):
    """Any field: a class_path must be a class (jsonargparse would call a function with its init_args)."""
    parser = build_parser()
    spec = '{"class_path": "tests.helpers.char_reward", "init_args": {"prompt": "a", "response": "b", "target": "c"}}'
    config = parser.parse_args(["fit", "--module.optimizer", spec])
    with pytest.raises(ConfigError, match="module.optimizer: class_path 'tests.helpers.char_reward' is not a class"):
        run(["fit", "--module.optimizer", spec, "--trainer.default_root_dir", str(tmp_path)])
    assert config.fit.module.init_args.optimizer.class_path == "tests.helpers.char_reward"


def test_any_typed_fields_keep_class_path_dicts_as_data():
    """The dict reaches the strategy as data (whose option check then names it), never as an ``OrderedDict()``."""
    parser = build_parser()
    options = '{"compile": {"class_path": "collections.OrderedDict"}}'
    config = parser.parse_args(["fit", "--trainer.strategy.generator_options", options])
    expected = r"generator_options.compile must be true, false or 'auto', got \{'class_path': 'collections.Ordered"
    with pytest.raises(ConfigError, match=expected):
        parser.instantiate(config)


# ---------------------------------------------------------------- case 15: one-line errors naming the user's field
@pytest.mark.parametrize(
    ("flags", "field"),
    [
        (["--module.lr", "-1"], "module.lr"),
        (["--module.weight_decay", "-0.1"], "module.weight_decay"),
        (["--module.reward_timeout_s", "0"], "module.reward_timeout_s"),
        (["--module.max_reward_error_frac", "2"], "module.max_reward_error_frac"),
        (["--module.sampling.temperature", "-1"], "module.sampling.temperature"),
        (["--module.val_sampling.top_p", "2"], "module.val_sampling.top_p"),
        # a string such as "false" switched the option on (truthy) before TorchGenerator's options were checked
        (["--trainer.strategy.generator_options", "{cpu_kernels: maybe}"], "trainer.strategy.generator_options"),
        (["--trainer.strategy.generator_options", "{compile_after_s: -1}"], "trainer.strategy.generator_options"),
    ],
)
def test_bad_values_name_the_user_field_before_any_run_folder(flags, field, tmp_path):
    with pytest.raises(ConfigError) as err:
        run(["fit", *flags, "--trainer.default_root_dir", str(tmp_path)])
    assert str(err.value).startswith(field)
    assert not any(tmp_path.iterdir())  # validated before the model loads or a run folder is made


def test_negative_lr_from_the_command_line_is_one_line(tmp_path):
    line = _one_line_error(_cli("fit", "--module.lr=-1e-4", "--trainer.default_root_dir", str(tmp_path)))
    assert "module.lr" in line and not any(tmp_path.iterdir())


def test_malformed_yaml_is_one_line_with_file_line_column(tmp_path):
    config = tmp_path / "broken.yaml"
    config.write_text("trainer:\n  max_steps: 3\n  logger: [true\n")
    line = _one_line_error(_cli("fit", "--config", str(config)))
    assert f"{config}:4:1" in line


# ------------------------------------------------------- case 17/19: environment variables, help, optimizer choice
def test_environment_variables_set_options():
    result = _cli("fit", "--print_config", env={"RLFORGE_FIT__TRAINER__MAX_STEPS": "7"})
    assert result.returncode == 0, result.stderr
    assert yaml.safe_load(result.stdout)["trainer"]["max_steps"] == 7


def test_help_names_env_variables_and_monarch_strategy():
    result = _cli("fit", "--help")
    assert result.returncode == 0, result.stderr
    assert "RLFORGE_FIT__TRAINER__MAX_STEPS" in result.stdout
    assert "MonarchStrategy" in result.stdout
    assert "monarch" not in _cli_modules()


def _cli_modules() -> set[str]:
    code = "import sys, rlforge.cli; print(' '.join(m for m in sys.modules if m.split('.')[0] in {'monarch', 'vllm'}))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_optimizer_and_scheduler_by_class_path(tiny_policy_dir, tmp_path):
    parser = build_parser()
    flags = fast_flags(tiny_policy_dir, tmp_path)
    extra = ["--module.optimizer", "SGD", "--module.optimizer.lr", "0.05", "--module.optimizer.momentum", "0.5"]
    scheduler = '{"class_path": "torch.optim.lr_scheduler.StepLR", "init_args": {"step_size": 1}}'
    extra += ["--module.lr_scheduler", scheduler]
    init = parser.instantiate(parser.parse_args(["fit", *flags, *extra])).fit
    init.trainer.fit(init.module, init.data)
    optimizer = init.trainer.optimizer
    assert type(optimizer) is torch.optim.SGD and optimizer.defaults["momentum"] == 0.5
    assert type(init.trainer.lr_scheduler) is torch.optim.lr_scheduler.StepLR
    # StepLR(step_size=1, gamma=0.1) stepped once per RL step: 0.05 -> 0.005 -> 0.0005.
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.05 * 0.1**2)
    assert len(metric_rows(tmp_path)) == 2
    # module.lr configures the default AdamW only: next to another optimizer it would be ignored, so it is refused.
    with pytest.raises(ConfigError, match="module.lr only applies without module.optimizer"):
        parser.instantiate(parser.parse_args(["fit", "--module.lr", "0.1", *extra]))


# ------------------------------------------------------------------------- case 18: options are never abbreviated
def test_no_prefix_matching():
    result = _cli("sft", "--data.dataset", "X", "--print_config")
    if result.returncode == 0:  # SFTDataModule has a `dataset` option of its own
        assert yaml.safe_load(result.stdout)["data"]["dataset_config"] is None
    else:
        assert "data.dataset" in _one_line_error(result)
    assert "max_step" in _one_line_error(_cli("fit", "--trainer.max_step", "5", "--print_config"))


# ------------------------------------------------------------------------------ case 23: VLLMGenerator is lazy
def test_vllm_generator_is_exported_lazily():
    code = (
        "import sys, rlforge.generation\n"
        "assert 'vllm' not in sys.modules\n"
        "from rlforge.generation import VLLMGenerator\n"
        "from rlforge.generation.vllm_generator import VLLMGenerator as Direct\n"
        "assert VLLMGenerator is Direct and 'vllm' not in sys.modules\n"
        "try:\n"
        "    VLLMGenerator('model')\n"
        "except ImportError as err:\n"
        "    print('missing-extra:', err)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("\n") <= 1  # nothing, or the one-line missing-extra error when vllm is absent
