"""What a reward is, and what a config may name as one.

A reward scores one sample: ``reward(prompt, response, target) -> float``. A config gives one as

* a ``Reward`` subclass by ``class_path`` (with ``init_args``): the only thing constructed while parsing, or
* the import path of a plain function (``tests.helpers.char_reward``): imported and signature-checked,
  never called until the run scores samples.

Anything else (``{class_path: os.system, init_args: {...}}``) is rejected before any of it runs. In Python,
``GRPOModule(reward_fns=[...])`` takes any such callable.
"""

from __future__ import annotations

import importlib
import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, Protocol

from jsonargparse.typing import register_type

from rlforge.errors import ConfigError

_REWARD_ARGS = ("prompt", "response", "target")


class Reward(ABC):
    """Base class of reward classes a config may construct by ``class_path``.

    Subclass it (or ``Reward.register`` your class) and implement ``__call__``.
    """

    @abstractmethod
    def __call__(self, prompt: str, response: str, target: str) -> float:
        """Returns the reward of ``response`` to ``prompt`` given the reference ``target``."""


class RewardFn(Protocol):
    """A reward function ``(prompt, response, target) -> float`` (in a config: its import path)."""

    def __call__(self, prompt: str, response: str, target: str) -> float: ...


def check_reward(fn: Any, field: str) -> Callable[[str, str, str], float]:
    """Returns ``fn`` if it can be called as ``fn(prompt, response, target)``; else a ``ConfigError`` naming ``field``.

    A string is an import path: it is imported, then checked (nothing is called).
    """
    if isinstance(fn, str):
        fn = import_reward_fn(fn, field)
    if not callable(fn) or inspect.isclass(fn):
        kind = "a class (give it by class_path so it is constructed)" if inspect.isclass(fn) else repr(fn)
        raise ConfigError(f"{field}: a reward must be a callable (prompt, response, target) -> float, got {kind}")
    try:
        inspect.signature(fn).bind(*_REWARD_ARGS)
    except TypeError as err:
        name = getattr(fn, "__qualname__", type(fn).__name__)
        raise ConfigError(
            f"{field}: {name} cannot be called as reward(prompt, response, target) -> float ({err})"
        ) from None
    except ValueError:  # builtins without a signature: they are no reward functions
        raise ConfigError(f"{field}: {fn!r} is not a reward function (prompt, response, target) -> float") from None
    return fn


def import_reward_fn(path: str, field: str = "reward") -> Callable[[str, str, str], float]:
    """Imports the function ``module.name`` (never calls it) and checks it is a Python reward function."""
    module_name, _, name = path.rpartition(".")
    if not module_name:
        raise ConfigError(f"{field}: {path!r} is not an import path (module.function)")
    try:
        fn = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as err:
        raise ConfigError(f"{field}: cannot import {path!r} ({err})") from None
    if not inspect.isfunction(fn):  # classes go by class_path; builtins (os.system, eval) are never rewards
        raise ConfigError(f"{field}: {path!r} is not a Python function (a Reward class goes by class_path)")
    return check_reward(fn, field)


def _deserialize(value: Any) -> Callable[[str, str, str], float]:
    if not isinstance(value, str):
        raise ValueError(f"expected the import path of a reward function, got {value!r}")
    try:
        return import_reward_fn(value)
    except ConfigError as err:
        raise ValueError(str(err)) from None


def _serialize(fn: Any) -> str:
    return f"{fn.__module__}.{fn.__qualname__}" if inspect.isfunction(fn) else repr(fn)


# jsonargparse resolves a RewardFn value through _deserialize (import + signature check) instead of its generic
# Callable support, which would call any function named by a class_path with its init_args.
register_type(
    RewardFn,
    serializer=_serialize,
    deserializer=_deserialize,
    deserializer_exceptions=(ValueError,),
    type_check=lambda value, _: inspect.isfunction(value),
)
