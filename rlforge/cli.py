"""``rlforge fit | validate``: a LightningCLI-style command line on jsonargparse.

Every run is described by three blocks, each settable from YAML (``--config``), dotted flags
(``--trainer.max_steps 5``) or ``class_path``/``init_args``::

    trainer:  RLTrainer arguments (strategy, callbacks, logger, ...)
    module:   an RLModule subclass (default GRPOModule), with its loss, rewards and sampling
    data:     RLDataModule arguments

``rlforge sft`` has the same blocks with ``SFTModule``/``SFTDataModule`` defaults.
``rlforge fit`` with no arguments runs the embedded offline default (``configs/default.yaml``).
``rlforge plot RUN_DIR`` draws a run's curves; ``rlforge export CKPT OUT_DIR`` writes a checkpoint's
policy as a Hugging Face folder.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from jsonargparse import ActionConfigFile, ArgumentParser, Namespace, lazy_instance

from rlforge.data import RLDataModule
from rlforge.data.sft import SFTDataModule
from rlforge.errors import RLForgeError
from rlforge.module import GRPOModule, RLModule
from rlforge.sft import SFTModule
from rlforge.trainer import RLTrainer

SUBCOMMANDS = {
    "fit": "Train a policy with RL (the default config runs offline on CPU).",
    "validate": "Evaluate a policy on the held-out prompts.",
    "sft": "Supervised fine-tuning (warm start); its checkpoint's policy/ folder is a `fit` module.model.",
}


def _stage_parser(stage: str) -> ArgumentParser:
    parser = ArgumentParser(description=SUBCOMMANDS[stage], exit_on_error=False)
    parser.add_argument("--config", action=ActionConfigFile, help="YAML config file(s) (later ones override).")
    parser.add_class_arguments(RLTrainer, "trainer", fail_untyped=True)
    module_default = lazy_instance(SFTModule) if stage == "sft" else lazy_instance(GRPOModule)
    parser.add_subclass_arguments(RLModule, "module", default=module_default, required=False)
    parser.add_class_arguments(SFTDataModule if stage == "sft" else RLDataModule, "data")
    parser.add_argument("--ckpt_path", type=str | None, default=None, help='Checkpoint folder or "last" to resume.')
    return parser


def _plot(args: Namespace) -> Any:
    from rlforge.plot import plot_run

    out = plot_run(args.run_dir, args.output)
    print(f"rlforge: wrote {out}")
    return out


def _export(args: Namespace) -> Any:
    from rlforge.export import export_policy

    out = export_policy(args.ckpt, args.out_dir, merge=args.merge, base=args.base)
    adapter = (out / "adapter_config.json").is_file()
    loader = "peft.PeftModel.from_pretrained(base, folder)" if adapter else "AutoModelForCausalLM.from_pretrained"
    print(f"rlforge: wrote {out} (loads with {loader})")
    return out


def _tool_parsers() -> dict[str, tuple[str, ArgumentParser, Any]]:
    plot = ArgumentParser(description="Write a PNG of reward/KL/entropy/response length from metrics.csv.")
    plot.add_argument("run_dir", type=str, help="Run folder (or a folder above it).")
    plot.add_argument("--output", type=str | None, default=None, help="PNG path (default RUN_DIR/curves.png).")
    export = ArgumentParser(description="Write a checkpoint's policy as a Hugging Face model folder.")
    export.add_argument("ckpt", type=str, help="Checkpoint folder, checkpoints folder (its last) or run root.")
    export.add_argument("out_dir", type=str, help="Destination folder.")
    export.add_argument("--merge", type=bool, default=False, help="LoRA runs: merge the adapters into the base model.")
    export.add_argument("--base", type=str | None, default=None, help="LoRA runs: base model (default: the adapter's).")
    return {
        "plot": ("Plot a run's curves (PNG) from metrics.csv.", plot, _plot),
        "export": ("Export a checkpoint's policy as a Hugging Face folder.", export, _export),
    }


def build_parser() -> ArgumentParser:
    """The ``rlforge`` parser with its subcommands."""
    parser = ArgumentParser(
        prog="rlforge", description=__doc__.splitlines()[0], exit_on_error=False, env_prefix="RLFORGE"
    )
    subcommands = parser.add_subcommands(dest="subcommand")
    for stage, help_text in SUBCOMMANDS.items():
        subcommands.add_subcommand(stage, _stage_parser(stage), help=help_text)
    for name, (help_text, tool_parser, _) in _tool_parsers().items():
        subcommands.add_subcommand(name, tool_parser, help=help_text)
    return parser


def _resolved_config(parser: ArgumentParser, config: Namespace, stage: str) -> dict[str, Any]:
    """The stage's config as plain YAML-able data (callables as import paths), as --print_config shows it."""
    plain = yaml.safe_load(parser.dump(config, skip_unset=False))[stage]
    plain.pop("config", None)
    return plain


def run(argv: Sequence[str] | None = None) -> Any:
    """Parses ``argv`` and runs the subcommand; returns what it returned (metrics for ``validate``)."""
    parser = build_parser()
    config = parser.parse_args(list(argv) if argv is not None else None)
    stage = config.subcommand
    stage_config = config[stage]
    if stage not in SUBCOMMANDS:
        return _tool_parsers()[stage][2](stage_config)
    init = parser.instantiate(config)[stage]
    trainer: RLTrainer = init.trainer
    trainer.run_config = _resolved_config(parser, config, stage)
    if stage in ("fit", "sft"):
        return trainer.fit(init.module, init.data, ckpt_path=stage_config.ckpt_path)
    return trainer.validate(init.module, init.data, ckpt_path=stage_config.ckpt_path)


def _quiet_third_party_progress() -> None:
    # Per-file download/load bars from transformers/datasets drown rlforge's own progress output.
    import datasets
    import transformers

    transformers.utils.logging.disable_progress_bar()
    datasets.disable_progress_bars()


_NOISE = (
    "Parser key",
    "Problem with given class_path",
    "Subtypes:",
    "Errors:",
    "Given value",
    "Does not validate",
)


def one_line_error(message: str) -> str:
    """Condenses jsonargparse's nested error report into ``field.path: cause``."""
    keys = re.findall(r'Parser key "([^"]+)"', message)
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    details = [line for line in lines if not line.startswith(_NOISE)]
    causes = [line[2:] for line in details if line.startswith("- ") and "NoneType" not in line] or details or lines
    cause = causes[0] if causes else "invalid arguments"
    return f"{'.'.join(keys)}: {cause}" if keys else cause


def _rlforge_cause(err: BaseException) -> RLForgeError | None:
    while err is not None and not isinstance(err, RLForgeError):
        err = err.__cause__
    return err


def main(argv: Sequence[str] | None = None) -> None:
    """Console entry point: errors become one line on stderr and exit code 2."""
    _quiet_third_party_progress()
    # Like `python -m`, let YAML class_paths name modules of the current project (e.g. examples.custom_loss).
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        run(argv)
    except RLForgeError as err:
        print(f"rlforge: error: {err}", file=sys.stderr)
        sys.exit(2)
    except Exception as err:
        cause = _rlforge_cause(err)  # jsonargparse wraps errors raised while it instantiates classes
        if cause is not None:
            print(f"rlforge: error: {cause}", file=sys.stderr)
            sys.exit(2)
        if type(err).__module__.startswith("jsonargparse") or type(err).__name__ == "ArgumentError":
            print(f"rlforge: error: {one_line_error(str(err)) or type(err).__name__}", file=sys.stderr)
            sys.exit(2)
        raise


if __name__ == "__main__":
    main()
