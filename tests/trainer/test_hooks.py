"""Hooks fire in the DESIGN.md order: callbacks first, then the module."""

from __future__ import annotations

import inspect

from rlforge import Callback, GRPOModule, RLDataModule, RLTrainer, WeightSync

HOOKS = [
    name
    for name, _ in inspect.getmembers(Callback, inspect.isfunction)
    if name.startswith(("on_", "setup", "teardown"))
]


class Recorder(Callback):
    def __init__(self, log: list[str]) -> None:
        self.log = log


class RecordingModule(GRPOModule):
    pass


def _record(obj, log: list[str], prefix: str) -> None:
    for name in HOOKS:
        original = getattr(obj, name)

        def hook(*args, _name=name, _original=original):
            log.append(f"{prefix}:{_name}")
            return _original(*args)

        setattr(obj, name, hook)


def _step(sync: bool, validate: bool, checkpoint: bool) -> list[str]:
    names = ["on_rollout_start", "on_rollout_end"]
    names += [
        "on_train_batch_start",
        "on_before_backward",
        "on_after_backward",
        "on_before_optimizer_step",
        "on_train_batch_end",
    ] * 2  # two minibatches
    if sync:
        names += ["on_weight_sync_start", "on_weight_sync_end"]
    if validate:
        names += ["on_validation_start", "on_validation_end"]
    names += ["on_train_step_end"]
    if checkpoint:
        names += ["on_save_checkpoint"]
    return names


def test_hook_order(tiny_policy_dir, tmp_path):
    log: list[str] = []
    callback = Recorder(log)
    _record(callback, log, "cb")
    module = RecordingModule(model=tiny_policy_dir, group_size=2)
    _record(module, log, "module")
    trainer = RLTrainer(
        max_steps=3,
        callbacks=[callback, WeightSync(sync_interval=2)],
        val_check_interval=2,
        minibatch_size=4,
        default_root_dir=str(tmp_path),
        enable_progress_bar=False,
    )
    trainer.checkpoint_callback.every_n_steps = 100  # only the final save
    trainer.fit(module, RLDataModule(task="addition", batch_size=4))

    expected_names = ["setup", "on_fit_start", "on_train_start", "on_validation_start", "on_validation_end"]
    expected_names += _step(sync=False, validate=False, checkpoint=False)
    expected_names += _step(sync=True, validate=True, checkpoint=False)
    expected_names += _step(sync=False, validate=True, checkpoint=True)  # save_last after the final step
    expected_names += ["on_train_end", "on_fit_end", "teardown"]
    expected = [entry for name in expected_names for entry in (f"cb:{name}", f"module:{name}")]
    assert log == expected


def test_exception_hooks_run_and_error_propagates(tiny_policy_dir, tmp_path):
    seen: list[BaseException] = []

    class Boom(Callback):
        def on_rollout_end(self, trainer, module, groups):
            raise RuntimeError("boom")

        def on_exception(self, trainer, module, exception):
            seen.append(exception)

    trainer = RLTrainer(
        max_steps=2,
        callbacks=[Boom()],
        default_root_dir=str(tmp_path),
        enable_progress_bar=False,
        val_at_start=False,
    )
    module = GRPOModule(model=tiny_policy_dir, group_size=2)
    try:
        trainer.fit(module, RLDataModule(batch_size=2))
    except RuntimeError as err:
        assert str(err) == "boom"
    else:
        raise AssertionError("fit() swallowed the error")
    assert len(seen) == 1 and str(seen[0]) == "boom"
