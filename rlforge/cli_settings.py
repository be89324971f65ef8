"""How the ``rlforge`` command line tunes jsonargparse: fresh defaults per class, no code run by values.

* Selecting another class (``--module.loss DAPOLoss``, a YAML ``class_path``) gives it ITS defaults. jsonargparse
  (4.x, its issue #460) carries every previous ``init_args`` entry that the new class also accepts, so DAPO got
  GRPO's ``clip_high 0.2``. Here the entries that still hold the previous class's defaults are dropped first;
  values the user set (different from those defaults) are still carried, as before.
* A ``class_path`` must name a class: jsonargparse would call a function named there with its ``init_args``
  (``{class_path: os.system, init_args: {command: ...}}``) when it instantiates. ``check_class_paths`` rejects
  that between parsing and instantiation, for every field.
* A config value may not name code-running modules (``os``, ``subprocess``, ``pickle``, ...): jsonargparse's
  import-path denylist is enforced instead of only warned about, and ``Any``-typed fields (``backend_options``,
  ``generator_options``) keep ``class_path`` dicts as data instead of instantiating them.

Configs are still code: a ``class_path`` imports and constructs that class, so only run configs you trust.
"""

from __future__ import annotations

import inspect
from typing import Any

from jsonargparse import Namespace, set_parsing_settings
from jsonargparse import _typehints as typehints  # the one private hook, see _drop_previous_defaults

from rlforge.errors import ConfigError

_installed = False


def _class_defaults(parser_or_action: Any, class_path: str) -> Namespace | dict[str, Any]:
    """The defaults of ``class_path``'s ``__init__`` as the parser normalises them (nested specs included)."""
    sub_add_kwargs = getattr(parser_or_action, "sub_add_kwargs", {}) or {}
    try:
        return typehints.ActionTypeHint.get_class_parser(class_path, sub_add_kwargs).get_defaults()
    except Exception:  # a class jsonargparse cannot describe: fall back to its plain signature
        try:
            params = inspect.signature(typehints.import_object(class_path)).parameters.values()
        except Exception:
            return {}  # nothing known to drop; jsonargparse reports what is wrong with the class
        return {p.name: p.default for p in params if p.default is not inspect.Parameter.empty}


def _drop_previous_defaults(parser_or_action: Any, prev_val: Any, value: Any) -> None:
    """Before jsonargparse merges ``prev_val``'s init_args into a new class, removes those that are defaults."""
    if (
        isinstance(prev_val, Namespace)
        and isinstance(prev_val.get("init_args"), Namespace)
        and value
        and prev_val.get("class_path")
        and prev_val["class_path"] != value["class_path"]
    ):
        defaults = _class_defaults(parser_or_action, prev_val["class_path"])
        init_args = prev_val["init_args"]
        for key, current in list(init_args.items(branches=True, nested=False)):
            if key in defaults and defaults[key] == current:
                del init_args[key]
    _original_discard(parser_or_action, prev_val, value)


_original_discard = typehints.discard_init_args_on_class_path_change


def configure_jsonargparse() -> None:
    """Installs the settings above (idempotent; called when the ``rlforge`` parser is built)."""
    global _installed
    if _installed:
        return
    # Both jsonargparse call sites (adapt_class_type and ActionTypeHint's static method) look the name up in
    # the module at call time, so replacing it covers CLI flags, --config files and nested specs alike.
    typehints.discard_init_args_on_class_path_change = _drop_previous_defaults
    # An empty denylist adds nothing but switches jsonargparse's default denylist from warning to enforced.
    set_parsing_settings(import_path_denylist=[], instantiate_subclass_spec_in_any=False)
    _installed = True


def check_class_paths(config: Any, field: str = "") -> None:
    """Raises a ``ConfigError`` naming the field when a ``class_path`` in a parsed config is not a class.

    Runs after parsing and before ``parser.instantiate``, so nothing named in the config has been called yet.
    """
    if isinstance(config, Namespace):
        class_path = config.get("class_path") if "class_path" in config else None
        if isinstance(class_path, str):
            target = typehints.import_object(class_path)
            if not inspect.isclass(target):
                raise ConfigError(
                    f"{field or 'config'}: class_path {class_path!r} is not a class; a class_path is constructed "
                    "with its init_args (a reward function is given by its import path alone)"
                )
        for key, value in config.items(branches=True, nested=False):
            sub = field if key == "init_args" else f"{field}.{key}" if field else key
            check_class_paths(value, sub)
    elif isinstance(config, (list, tuple)):
        for index, value in enumerate(config):
            check_class_paths(value, f"{field}[{index}]")
