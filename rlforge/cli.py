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

Every option can also be set as ``RLFORGE_<STAGE>__<DOTTED__KEY>`` (``RLFORGE_FIT__TRAINER__MAX_STEPS=7``);
options are never abbreviated. Configs are code: a ``class_path`` imports and constructs that class, so only
run configs you trust (what a value may name is narrowed in ``rlforge.cli_settings``).
"""

from __future__ import annotations

import errno
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from jsonargparse import ActionConfigFile, ArgumentParser, Namespace, lazy_instance

from rlforge.cli_settings import check_class_paths, configure_jsonargparse
from rlforge.data import RLDataModule
from rlforge.data.sft import SFTDataModule
from rlforge.errors import ConfigError, RLForgeError
from rlforge.generation import SamplingParams
from rlforge.grpo import GRPOModule
from rlforge.module import RLModule
from rlforge.sft import SFTModule
from rlforge.strategies.monarch import MonarchStrategy  # noqa: F401 - lists it in --help; monarch loads on use
from rlforge.trainer import RLTrainer

SUBCOMMANDS = {
    "fit": "Train a policy with RL (the default config runs offline on CPU).",
    "validate": "Evaluate a policy on the held-out prompts.",
    "sft": "Supervised fine-tuning (warm start); its checkpoint's policy/ folder is a `fit` module.model.",
}


def _stage_parser(stage: str) -> ArgumentParser:
    parser = ArgumentParser(description=SUBCOMMANDS[stage], exit_on_error=False, allow_abbrev=False)
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
    plot = ArgumentParser(
        description="Write a PNG of reward/KL/entropy/response length from metrics.csv.", allow_abbrev=False
    )
    plot.add_argument("run_dir", type=str, help="Run folder (or a folder above it).")
    plot.add_argument("--output", type=str | None, default=None, help="PNG path (default RUN_DIR/curves.png).")
    export = ArgumentParser(
        description="Write a checkpoint's policy as a Hugging Face model folder.", allow_abbrev=False
    )
    export.add_argument("ckpt", type=str, help="Checkpoint folder, checkpoints folder (its last) or run root.")
    export.add_argument("out_dir", type=str, help="Destination folder.")
    export.add_argument("--merge", type=bool, default=False, help="LoRA runs: merge the adapters into the base model.")
    export.add_argument("--base", type=str | None, default=None, help="LoRA runs: base model (default: the adapter's).")
    return {
        "plot": ("Plot a run's curves (PNG) from metrics.csv.", plot, _plot),
        "export": ("Export a checkpoint's policy as a Hugging Face folder.", export, _export),
    }


def build_parser() -> ArgumentParser:
    """The ``rlforge`` parser with its subcommands.

    Every option can also come from the environment: ``RLFORGE_<SUBCOMMAND>__<DOTTED__KEY>``, e.g.
    ``RLFORGE_FIT__TRAINER__MAX_STEPS=7`` (``--help`` names each variable). Options are never abbreviated.
    """
    configure_jsonargparse()
    parser = ArgumentParser(
        prog="rlforge",
        description=__doc__.splitlines()[0],
        exit_on_error=False,
        env_prefix="RLFORGE",
        default_env=True,
        allow_abbrev=False,
    )
    subcommands = parser.add_subcommands(dest="subcommand")
    for stage, help_text in SUBCOMMANDS.items():
        subcommands.add_subcommand(stage, _stage_parser(stage), help=help_text)
    for name, (help_text, tool_parser, _) in _tool_parsers().items():
        subcommands.add_subcommand(name, tool_parser, help=help_text)
    return parser


def _with_user_field(err: Exception, stage_config: Namespace) -> Exception:
    """``SamplingParams`` names its fields ``sampling.*``; say which of the module's two it was."""
    cause = _rlforge_cause(err)
    if not isinstance(cause, ConfigError) or not str(cause).startswith("sampling."):
        return err
    init_args = stage_config.get("module.init_args") or Namespace()
    for name in ("sampling", "val_sampling"):
        value = init_args.get(name)
        if isinstance(value, Namespace):
            try:
                SamplingParams(**value.as_dict())
            except ConfigError:
                return ConfigError(f"module.{name}.{str(cause).removeprefix('sampling.')}")
    return err


def _resolved_config(parser: ArgumentParser, config: Namespace, stage: str) -> dict[str, Any]:
    """The stage's config as plain YAML-able data (callables as import paths), as --print_config shows it."""
    plain = yaml.safe_load(parser.dump(config, skip_unset=False))[stage]
    plain.pop("config", None)
    return plain


def check_config_files(argv: Sequence[str]) -> None:
    """Raises ``ConfigError`` ``FILE:LINE:COLUMN: problem`` for a ``--config`` file that is not valid YAML.

    jsonargparse parses the file's text, so its own error has lost the file name.
    """
    paths = [b for a, b in zip(argv, argv[1:], strict=False) if a == "--config"]
    paths += [a.split("=", 1)[1] for a in argv if a.startswith("--config=")]
    for path in paths:
        if not Path(path).is_file():
            continue  # jsonargparse reports it (or it is inline YAML)
        try:
            yaml.safe_load(Path(path).read_text())
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else path
            problem = getattr(err, "problem", None) or str(err).splitlines()[0]
            raise ConfigError(f"{where}: invalid YAML: {problem}") from None


def run(argv: Sequence[str] | None = None) -> Any:
    """Parses ``argv`` and runs the subcommand; returns what it returned (metrics for ``validate``)."""
    argv = list(argv) if argv is not None else sys.argv[1:]
    check_config_files(argv)
    parser = build_parser()
    config = parser.parse_args(argv)
    stage = config.subcommand
    stage_config = config[stage]
    if stage not in SUBCOMMANDS:
        return _tool_parsers()[stage][2](stage_config)
    check_class_paths(stage_config)
    try:
        init = parser.instantiate(config)[stage]
    except Exception as err:
        renamed = _with_user_field(err, stage_config)
        if renamed is err:
            raise
        raise renamed from err
    trainer: RLTrainer = init.trainer
    trainer.run_config = _resolved_config(parser, config, stage)
    if stage in ("fit", "sft"):
        return trainer.fit(init.module, init.data, ckpt_path=stage_config.ckpt_path)
    return trainer.validate(init.module, init.data, ckpt_path=stage_config.ckpt_path)


_NOISE = (
    "Parser key",
    "Problem with given class_path",
    "Subtypes:",
    "Errors:",
    "Given value",
    "Does not validate",
    "Expected a <class 'NoneType'>",
    "Expected a path but",  # jsonargparse also tries a class name as a config file path
)


def one_line_error(message: str) -> str:
    """Condenses jsonargparse's nested error report into ``field.path: cause; other cause``."""
    keys = re.findall(r'Parser key "([^"]+)"', message)
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    details = [line.removeprefix("- ") for line in lines]
    causes = list(dict.fromkeys(line for line in details if not line.startswith(_NOISE))) or details
    cause = "; ".join(causes) if causes else "invalid arguments"
    return f"{'.'.join(keys)}: {cause}" if keys else cause


def _rlforge_cause(err: BaseException) -> RLForgeError | None:
    while err is not None and not isinstance(err, RLForgeError):
        err = err.__cause__
    return err


def main(argv: Sequence[str] | None = None) -> None:
    """Console entry point: errors become one line on stderr and exit code 2; Ctrl-C one line and exit 130."""
    # Like `python -m`, let YAML class_paths name modules of the current project (e.g. examples.custom_loss).
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        run(argv)
    except KeyboardInterrupt:
        # The trainer already saved what it could and printed the run folder; no traceback for a Ctrl-C.
        print("rlforge: interrupted (Ctrl-C); resume with --ckpt_path last", file=sys.stderr)
        sys.exit(130)
    except RLForgeError as err:
        print(f"rlforge: error: {err}", file=sys.stderr)
        sys.exit(2)
    except OSError as err:
        if err.errno != errno.ENOSPC:
            raise
        print(f"rlforge: error: no space left on device ({err.filename or err})", file=sys.stderr)
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
