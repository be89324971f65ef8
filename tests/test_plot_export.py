"""`rlforge plot` writes a readable PNG; a checkpoint's policy (and `rlforge export`) loads with plain transformers."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from rlforge import GRPOModule, KLMonitor, RLDataModule, RLTrainer
from rlforge.cli import main
from tests.helpers import char_reward

# Runs with no rlforge on the path: plain transformers loads each folder and saves its logits.
LOAD_WITH_TRANSFORMERS = """
import sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
ids = torch.load(sys.argv[1])
out = {}
for folder in sys.argv[3:]:
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    AutoTokenizer.from_pretrained(folder)
    with torch.no_grad():
        out[folder] = model(input_ids=ids).logits
assert not [m for m in sys.modules if m.split(".")[0] == "rlforge"]
torch.save(out, sys.argv[2])
"""


@pytest.fixture(scope="module")
def trained(tiny_policy_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("run")
    module = GRPOModule(model=tiny_policy_dir, group_size=3, reward_fns=[char_reward], lr=5e-2)
    trainer = RLTrainer(
        max_steps=3,
        default_root_dir=str(root),
        enable_progress_bar=False,
        val_check_interval=None,
        callbacks=[KLMonitor()],
    )
    trainer.fit(module, RLDataModule(batch_size=2))
    return root, trainer, tiny_policy_dir


def test_plot_writes_a_readable_png(trained, tmp_path, capsys):
    import matplotlib.image

    root, trainer, _ = trained
    out = tmp_path / "curves.png"
    main(["plot", str(root), "--output", str(out)])
    assert f"wrote {out}" in capsys.readouterr().out
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    image = matplotlib.image.imread(out)
    assert image.shape[0] >= 500 and image.shape[1] >= 800
    assert image[..., :3].std() > 0.05  # drawn curves and text, not a blank canvas
    main(["plot", str(trainer.log_dir)])  # default output beside metrics.csv
    assert (trainer.log_dir / "curves.png").is_file()


def test_plot_without_metrics_is_one_clear_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["plot", str(tmp_path)])
    assert exit_.value.code == 2 and "no metrics.csv" in capsys.readouterr().err


def test_checkpoint_and_export_load_in_plain_transformers_with_same_logits(trained, tmp_path):
    root, trainer, _ = trained
    ckpt = root / "rlforge" / "version_0" / "checkpoints" / "step-000003"
    exported = tmp_path / "exported"
    main(["export", str(root), str(exported)])  # run root -> its last checkpoint
    names = {p.name for p in exported.iterdir()}
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer_config.json"} <= names

    ids = torch.tensor([[5, 17, 42, 99, 3, 250, 7, 11], [1, 2, 3, 4, 5, 6, 7, 8]])
    torch.save(ids, tmp_path / "ids.pt")
    folders = [str(ckpt / "policy"), str(exported)]
    subprocess.run(
        [sys.executable, "-c", LOAD_WITH_TRANSFORMERS, str(tmp_path / "ids.pt"), str(tmp_path / "out.pt"), *folders],
        check=True,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
    )
    loaded = torch.load(tmp_path / "out.pt")
    policy = trainer.module.policy.eval()
    with torch.no_grad():
        expected = policy(input_ids=ids).logits
    from transformers import AutoModelForCausalLM

    with torch.no_grad():  # training really moved the weights, so equal logits mean the trained ones were saved
        start = AutoModelForCausalLM.from_pretrained(trained[2]).eval()(input_ids=ids).logits
    assert (start - expected).abs().max() > 1e-3
    for folder in folders:
        assert torch.equal(loaded[folder], expected), folder
