"""``OpenEnvEnvironment``: any OpenEnv environment (``openenv-core``) as an rlforge ``Environment``.

Two ways to reach the OpenEnv environment:

- ``base_url``: a running OpenEnv server (``create_app(...)`` served by uvicorn, a Docker image, a Space). Each
  episode opens its own WebSocket session (OpenEnv's ``EnvClient``; the server gives every session its own
  environment instance) and closes it at the end. The server must allow as many concurrent sessions as there
  are live episodes (``create_app(..., max_concurrent_envs=batch_size * group_size)``).
- ``env_class``: an OpenEnv ``Environment`` subclass run in this process, one instance per episode.

Text <-> typed objects: the model's turn becomes ``ActionClass(**{action_field: text})``; the observation's text
is ``observation_field`` (default: its only ``str`` field, else ``name=value`` of its fields); the reward is the
observation's ``reward`` and the end its ``done``. ``info_fields`` (default ``success``, ``tool_calls``) are read
from the observation's ``metadata`` or, because OpenEnv's server does not send ``metadata`` over the wire, from
the observation's fields of that name.

Every WebSocket client of this process runs on one shared background event loop (the rollout calls ``reset`` and
``step`` of all live episodes at once from threads, each with its own short-lived loop, which a connection
cannot outlive).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
import inspect
import json
import os
import threading
import typing
import urllib.request
from typing import Any

from rlforge.envs.base import Environment, Observation, StepResult
from rlforge.errors import ConfigError
from rlforge.imports import require

_WHERE = "module.environment"
_SKIPPED = ("reward", "done", "metadata")  # what every OpenEnv Observation has besides its own fields
_EPISODES_LOCK = threading.Lock()  # guards an episode's open/closed handles (reset and close run in two threads)


def _import(path: str, field: str) -> Any:
    module, _, name = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as err:
        raise ConfigError(f"{_WHERE}.{field}: cannot import {path!r} ({type(err).__name__}: {err})") from err


def _generic_arg(cls: type, base_name: str, index: int) -> Any:
    """Type argument ``index`` of ``cls``'s parametrised OpenEnv base ``base_name`` (``EnvClient[ActT, ...]``)."""
    for klass in cls.__mro__:
        for base in getattr(klass, "__orig_bases__", ()):
            origin = typing.get_origin(base)
            if origin is not None and origin.__name__ == base_name:
                args = typing.get_args(base)
                if len(args) > index and isinstance(args[index], type):
                    return args[index]
    return None


def _str_fields(model: type) -> list[str]:
    fields = getattr(model, "model_fields", {})
    return [name for name, info in fields.items() if info.annotation is str and name not in _SKIPPED]


def _closed_by_server(err: BaseException) -> bool:
    from websockets.exceptions import ConnectionClosed

    return isinstance(err, ConnectionClosed)


class _Loop:
    """One event loop in a daemon thread, shared by this process's clients (re-made after a fork)."""

    _lock = threading.Lock()
    _loop: asyncio.AbstractEventLoop | None = None
    _pid = -1

    @classmethod
    def run(cls, coro: Any, timeout: float) -> Any:
        with cls._lock:
            if cls._loop is None or cls._pid != os.getpid() or not cls._loop.is_running():
                cls._loop, cls._pid = asyncio.new_event_loop(), os.getpid()
                ready = threading.Event()
                loop = cls._loop
                loop.call_soon(ready.set)
                threading.Thread(target=loop.run_forever, daemon=True, name="rlforge-openenv").start()
                ready.wait(10)
            loop = cls._loop
        future = asyncio.run_coroutine_threadsafe(coro, loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"no answer within {timeout:g}s") from None


class OpenEnvEnvironment(Environment):
    """Drives an OpenEnv environment, over its server (``base_url``) or in this process (``env_class``).

    Args:
        base_url: URL of a running OpenEnv server, e.g. ``http://127.0.0.1:8000``.
        env_class: Import path of an OpenEnv ``Environment`` subclass to run in this process instead.
        env_kwargs: Constructor arguments of ``env_class``.
        client_class: Import path of the environment's own ``EnvClient`` subclass (typed actions and
            observations); default ``openenv.core.GenericEnvClient`` (plain dicts, no package of the environment
            needed).
        action_class: Import path of the environment's ``Action`` type; default: read from ``client_class`` or
            ``env_class`` (their type parameters, ``step``'s annotation) or, for a server, its ``/schema``.
        action_field: The action field that receives the model's text; default: the action's only ``str`` field.
        observation_field: The observation field shown to the model; default: its only ``str`` field, else
            ``name=value`` of every field but ``reward``/``done``/``metadata``.
        info_fields: Keys copied into ``StepResult.info`` from the observation's ``metadata`` or fields
            (``success`` -> ``val/accuracy``, ``tool_calls`` -> ``rollout/tool_calls_mean``).
        reset_fields: Dataset row fields passed to OpenEnv's ``reset`` as keyword arguments (with ``seed``);
            default every field (OpenEnv passes on only those its ``reset`` accepts).
        max_turns: Model turns per episode.
        timeout_s: Time limit of one ``reset``/``step`` (connecting included).
        reward_mode: ``final`` or ``sum`` of the per-step rewards.
    """

    def __init__(
        self,
        base_url: str | None = None,
        env_class: str | None = None,
        env_kwargs: dict[str, Any] | None = None,
        client_class: str | None = None,
        action_class: str | None = None,
        action_field: str | None = None,
        observation_field: str | None = None,
        info_fields: list[str] | None = None,
        reset_fields: list[str] | None = None,
        max_turns: int = 4,
        timeout_s: float = 30.0,
        reward_mode: str = "final",
    ) -> None:
        super().__init__(max_turns=max_turns, timeout_s=timeout_s, reward_mode=reward_mode)
        if (base_url is None) == (env_class is None):
            raise ConfigError(f"{_WHERE}: give exactly one of base_url (an OpenEnv server) or env_class")
        if env_class is not None and client_class is not None:
            raise ConfigError(f"{_WHERE}.client_class is for base_url; env_class runs without a client")
        require("openenv", "OpenEnvEnvironment")
        self.base_url, self.env_class, self.env_kwargs = base_url, env_class, dict(env_kwargs or {})
        self.client_class, self.action_class = client_class, action_class
        self.action_field, self.observation_field = action_field, observation_field
        self.info_fields = list(info_fields) if info_fields is not None else ["success", "tool_calls"]
        self.reset_fields = list(reset_fields) if reset_fields is not None else None
        # Per-episode state, set on the spawned copy only (the template stays deep-copyable: nothing connects here).
        self._client: Any = None
        self._env: Any = None
        self._closed = False
        # Imported here, once: importing OpenEnv's client takes seconds, which must not count in a reset's timeout.
        self._client_cls: type | None = None
        if base_url is not None:
            if client_class is not None:
                self._client_cls = _import(client_class, "client_class")
            else:
                from openenv.core.generic_client import GenericEnvClient

                self._client_cls = GenericEnvClient
        self._action_spec: tuple[type | None, str] | None = None
        if self.action_class or self.env_class or self.client_class or self.action_field:
            self._resolve_action()  # a bad import path or field fails here, not in every episode

    def spawn(self) -> OpenEnvEnvironment:
        """A copy for one episode; the action type is looked up once, on the template, before copying."""
        self._resolve_action()
        return super().spawn()  # type: ignore[return-value]

    # ----- the episode

    def reset(self, row: dict[str, Any], seed: int) -> Observation:
        """Opens this episode's session and returns OpenEnv's first observation as the prompt."""
        kwargs = {k: v for k, v in row.items() if self.reset_fields is None or k in self.reset_fields}
        kwargs["seed"] = seed
        if self.env_class is not None:
            env = self._open(_import(self.env_class, "env_class")(**self.env_kwargs))
            params = inspect.signature(env.reset).parameters
            if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
                kwargs = {k: v for k, v in kwargs.items() if k in params}  # as OpenEnv's server filters them
            return Observation(self._text(self._fields(env.reset(**kwargs))))
        client = self._open(self._client_cls(**self._client_kwargs()))
        result = self._call(client.reset(**kwargs), "reset")
        self._close_if_abandoned(client)
        return Observation(self._text(self._fields(result.observation)))

    def step(self, action: str) -> StepResult:
        """Sends the model's text as the action; reward, ``done`` and ``info`` come from the observation."""
        typed = self._action(action)
        if self._env is not None:
            obs = self._env.step(typed)
            fields, reward, done = self._fields(obs), getattr(obs, "reward", None), getattr(obs, "done", False)
        elif self._client is not None:
            result = self._call(self._client.step(typed), "step")
            fields, reward, done = self._fields(result.observation), result.reward, result.done
        else:
            raise RuntimeError("step of an episode that is not open")
        info = {k: fields[k] for k in self.info_fields if k in fields}
        info.update({k: v for k, v in fields.get("metadata", {}).items() if k in self.info_fields})
        text = None if done else Observation(self._text(fields))
        return StepResult(observation=text, reward=float(reward or 0.0), done=bool(done), info=info)

    def close(self) -> None:
        """Ends this episode's session (the server then drops its environment instance)."""
        with _EPISODES_LOCK:
            self._closed = True
            client, env, self._client, self._env = self._client, self._env, None, None
        if client is not None:
            self._call(client.close(), "close")
        if env is not None:
            env.close()

    def _open(self, handle: Any) -> Any:
        """Keeps this episode's client or environment, unless the runner already closed the episode.

        A ``reset`` past ``timeout_s`` is abandoned by the runner, which closes the episode; the call may still
        finish later, and must not leave a session open on the server.
        """
        with _EPISODES_LOCK:
            closed = self._closed
            if not closed and self.env_class is not None:
                self._env = handle
            elif not closed:
                self._client = handle
        if closed:
            if self.env_class is not None:
                handle.close()  # a client has not connected yet: nothing to close
            raise RuntimeError("the episode was closed before reset finished")
        return handle

    def _close_if_abandoned(self, client: Any) -> None:
        with _EPISODES_LOCK:
            abandoned = self._closed
        if abandoned:  # the runner's close may have run while this client was still connecting: close it again
            self._call(client.close(), "close")
            raise RuntimeError("the episode was closed before reset finished")

    # ----- mapping text <-> OpenEnv's typed objects

    def _action(self, text: str) -> Any:
        cls, field = self._resolve_action()
        return cls(**{field: text}) if cls is not None else {field: text}

    def _resolve_action(self) -> tuple[type | None, str]:
        """The action type (``None``: a plain dict, for ``GenericEnvClient``) and the field that gets the text."""
        if self._action_spec is not None:
            return self._action_spec
        cls: type | None = None
        if self.action_class is not None:
            cls = _import(self.action_class, "action_class")
        elif self.env_class is not None:
            env_cls = _import(self.env_class, "env_class")
            try:
                hints = typing.get_type_hints(env_cls.step)
            except Exception:  # noqa: BLE001 - unresolvable annotations: fall back to the type parameters
                hints = {}
            cls = hints.get("action") if isinstance(hints.get("action"), type) else None
            cls = cls or _generic_arg(env_cls, "Environment", 0)
        elif self._client_cls is not None:
            cls = _generic_arg(self._client_cls, "EnvClient", 0)
        field = self.action_field
        if field is None:
            names = _str_fields(cls) if cls is not None else self._schema_str_fields()
            if len(names) != 1:
                raise ConfigError(
                    f"{_WHERE}.action_field: the action has {len(names)} str fields {names}; name the one that "
                    "gets the model's text"
                )
            field = names[0]
        elif cls is not None and field not in getattr(cls, "model_fields", {}):
            raise ConfigError(f"{_WHERE}.action_field: {cls.__name__} has no field {field!r}")
        self._action_spec = (cls, field)
        return self._action_spec

    def _schema_str_fields(self) -> list[str]:
        """The action's ``str`` fields from the server's ``/schema`` (when no Action type is known here)."""
        url = f"{self.base_url.rstrip('/')}/schema"
        try:
            with urllib.request.urlopen(url, timeout=self.timeout_s) as answer:  # noqa: S310 - the user's server
                schema = json.load(answer)["action"]
        except Exception as err:  # noqa: BLE001 - any failure means: cannot guess
            raise ConfigError(
                f"{_WHERE}.action_field: not given, and {url} could not be read to guess it ({err}); "
                "set action_field or action_class"
            ) from err
        props = schema.get("properties", {})
        return [name for name, spec in props.items() if spec.get("type") == "string" and name not in _SKIPPED]

    def _fields(self, observation: Any) -> dict[str, Any]:
        if isinstance(observation, dict):
            return observation
        if hasattr(observation, "model_dump"):
            return observation.model_dump()
        raise TypeError(f"OpenEnv observation is a {type(observation).__name__}, expected a dict or a pydantic model")

    def _text(self, fields: dict[str, Any]) -> str:
        shown = {k: v for k, v in fields.items() if k not in _SKIPPED}
        if self.observation_field is not None:
            if self.observation_field not in shown:
                raise KeyError(f"observation has no field {self.observation_field!r} (has {sorted(shown)})")
            return str(shown[self.observation_field])
        texts = [v for v in shown.values() if isinstance(v, str)]
        if len(texts) == 1:
            return texts[0]
        return ", ".join(f"{k}={v}" for k, v in shown.items())

    # ----- the connection

    def _client_kwargs(self) -> dict[str, Any]:
        return {
            "base_url": self.base_url,
            "connect_timeout_s": min(10.0, self.timeout_s),
            "message_timeout_s": self.timeout_s,
        }

    def _call(self, coro: Any, what: str) -> Any:
        try:
            return _Loop.run(coro, self.timeout_s)
        except Exception as err:
            hint = ""
            # A server at capacity answers a new session with an error and closes it at once; which of the two
            # the client sees first is a race, so both get the hint.
            if "CAPACITY_REACHED" in str(err) or (what == "reset" and _closed_by_server(err)):
                hint = (
                    "; the server may be at capacity (every live episode holds one session): serve the environment "
                    "with create_app(..., max_concurrent_envs=<at least batch_size * group_size>)"
                )
            raise RuntimeError(f"OpenEnv server {self.base_url}: {what} failed: {err}{hint}") from err
