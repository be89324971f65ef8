"""``Tool``: a typed Python callable the model can call, with a JSON-schema description and checked arguments.

The schema comes from the function itself: parameter types from ``typing.get_type_hints``, the description and
parameter descriptions from its Google-style docstring (``Args:``). Calling a tool never raises: missing, extra
or wrongly typed arguments and exceptions inside the function all come back as one line starting ``error:``,
which is what the model sees, so a bad tool call costs the episode a turn, never the run.

>>> def add(a: int, b: int = 1) -> int:
...     '''Adds two integers.
...
...     Args:
...         a: The first.
...         b: The second.
...     '''
...     return a + b
>>> tool = Tool.from_function(add)
>>> tool.parameters["properties"]["a"], tool.parameters["required"]
({'type': 'integer', 'description': 'The first.'}, ['a'])
>>> tool({"a": 2, "b": 3})
'5'
>>> print(tool({"a": "2"}))
error: add: argument 'a' must be integer, got string "2"
"""

from __future__ import annotations

import functools
import inspect
import json
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Union

import docstring_parser

from rlforge.errors import ConfigError

ERROR_PREFIX = "error: "
"""How every tool failure the model sees begins."""

_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}
_ARRAYS = (list, tuple, Sequence, typing.List, typing.Tuple, typing.Sequence)  # noqa: UP006 - old spellings too
_OBJECTS = (dict, Mapping, typing.Dict, typing.Mapping)  # noqa: UP006


class ToolError(Exception):
    """Raised inside a tool to give the model a clean ``error: <message>`` (no exception type name)."""


class _Mismatch(Exception):
    pass


def json_type_schema(tp: Any) -> dict[str, Any]:
    """The JSON-schema of the Python type ``tp`` (str, int, float, bool, None, Any, list/tuple/dict, Literal, unions).

    Raises:
        TypeError: ``tp`` has no JSON counterpart.
    """
    if tp is Any:
        return {}
    if tp in _SCALARS:
        return {"type": _SCALARS[tp]}
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Literal:
        kinds = {_SCALARS.get(type(a)) for a in args}
        return {"type": kinds.pop(), "enum": list(args)} if len(kinds) == 1 else {"enum": list(args)}
    if origin in (Union, types.UnionType):
        options = [json_type_schema(a) for a in args]
        if all(set(o) == {"type"} for o in options):
            return {"type": [o["type"] for o in options]}
        return {"anyOf": options}
    if tp in _ARRAYS or origin in _ARRAYS:
        items = [a for a in args if a is not Ellipsis]
        if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
            raise TypeError(f"fixed-length {tp} is not supported; use tuple[X, ...] or list[X]")
        return {"type": "array", **({"items": json_type_schema(items[0])} if items else {})}
    if tp in _OBJECTS or origin in _OBJECTS:
        if args and args[0] is not str:
            raise TypeError(f"{tp}: JSON object keys are strings")
        return {"type": "object", **({"additionalProperties": json_type_schema(args[1])} if args else {})}
    raise TypeError(f"type {tp!r} has no JSON counterpart")


def _describe(value: Any) -> str:
    kind = {str: "string", bool: "boolean", int: "integer", float: "number", type(None): "null"}.get(type(value))
    kind = kind or ("array" if isinstance(value, list) else "object" if isinstance(value, dict) else "value")
    text = json.dumps(value) if kind != "value" else repr(value)
    return f"{kind} {text if len(text) <= 40 else text[:37] + '...'}"


def convert(value: Any, tp: Any) -> Any:
    """``value`` (decoded JSON) as the Python type ``tp``; ints widen to float and arrays become tuples.

    Raises:
        _Mismatch: ``value`` does not fit ``tp``.
    """
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return value
    if tp is float and type(value) in (int, float):
        return float(value)
    if tp in _SCALARS:
        if type(value) is not tp:  # `type is`, so True is not an int and 1 is not a bool
            raise _Mismatch
        return value
    if origin is Literal:
        if not any(type(value) is type(a) and value == a for a in args):
            raise _Mismatch
        return value
    if origin in (Union, types.UnionType):
        for option in args:
            try:
                return convert(value, option)
            except _Mismatch:
                pass
        raise _Mismatch
    if tp in _ARRAYS or origin in _ARRAYS:
        if not isinstance(value, list):
            raise _Mismatch
        item = args[0] if args else Any
        items = [convert(v, item) for v in value]
        return tuple(items) if tp is tuple or origin is tuple else items
    if tp in _OBJECTS or origin in _OBJECTS:
        if not isinstance(value, dict):
            raise _Mismatch
        return {k: convert(v, args[1]) for k, v in value.items()} if args else dict(value)
    raise _Mismatch


def _schema_name(schema: dict[str, Any]) -> str:
    """How an error message names a JSON schema: ``integer``, ``array or null``, ``one of "a", "b"``."""
    if "enum" in schema:
        return "one of " + ", ".join(json.dumps(v) for v in schema["enum"])
    if "anyOf" in schema:
        return " or ".join(_schema_name(option) for option in schema["anyOf"])
    kind = schema.get("type", "any value")
    return " or ".join(kind) if isinstance(kind, list) else kind


def _annotated_target(fn: Callable[..., Any]) -> Any:
    """What ``get_type_hints`` must read: the wrapped function of a partial, ``__call__`` of a callable object."""
    if isinstance(fn, functools.partial):
        return _annotated_target(fn.func)
    if inspect.isroutine(fn) or inspect.isclass(fn):
        return fn
    return type(fn).__call__


@dataclass
class Tool:
    """A callable the model can call by name, described by a JSON schema.

    Args:
        name: What the model writes in a call (``"calculator"``).
        description: What the tool does (the docstring's text before ``Args:``).
        parameters: JSON schema of the arguments: ``{"type": "object", "properties": ..., "required": [...]}``.
        fn: The Python callable; called with keyword arguments.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[..., Any]
    types: dict[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if not self.types:
            hints = typing.get_type_hints(_annotated_target(self.fn))
            self.types = {p: hints.get(p, Any) for p in self.parameters.get("properties", {})}

    @classmethod
    def from_function(cls, fn: Callable[..., Any], where: str = "tool") -> Tool:
        """The tool of a typed Python callable (a ``Tool`` is returned as it is).

        Args:
            fn: A function with a type annotation on every parameter and, ideally, a Google-style docstring.
            where: The config field named in errors (``module.environment.tools``).

        Raises:
            ConfigError: A parameter has no annotation, no JSON type, or is ``*args``/``**kwargs``/positional-only.
        """
        if isinstance(fn, Tool):
            return fn
        name = getattr(fn, "__name__", None) or type(fn).__name__
        if not callable(fn) or not name.isidentifier():
            raise ConfigError(f"{where}: {fn!r} is not a named callable (use a def, not a lambda)")
        try:
            signature, hints = inspect.signature(fn), typing.get_type_hints(_annotated_target(fn))
        except (TypeError, ValueError, NameError) as err:
            raise ConfigError(f"{where}: cannot read the signature of tool {name!r}: {err}") from None
        doc = docstring_parser.parse(inspect.getdoc(fn) or "", style=docstring_parser.DocstringStyle.GOOGLE)
        arg_docs = {p.arg_name: " ".join((p.description or "").split()) for p in doc.params}
        properties, required, kinds = {}, [], {}
        for param in signature.parameters.values():
            if param.kind not in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
                raise ConfigError(f"{where}: tool {name!r} parameter {param.name!r} must be a named parameter")
            if param.name not in hints:
                raise ConfigError(f"{where}: tool {name!r} parameter {param.name!r} needs a type annotation")
            try:
                schema = json_type_schema(hints[param.name])
            except TypeError as err:
                raise ConfigError(f"{where}: tool {name!r} parameter {param.name!r}: {err}") from None
            if arg_docs.get(param.name):
                schema["description"] = arg_docs[param.name]
            if param.default is param.empty:
                required.append(param.name)
            properties[param.name], kinds[param.name] = schema, hints[param.name]
        description = "\n\n".join(part for part in (doc.short_description, doc.long_description) if part)
        parameters = {"type": "object", "properties": properties, "required": required}
        return cls(name=name, description=description, parameters=parameters, fn=fn, types=kinds)

    def schema(self) -> dict[str, Any]:
        """The OpenAI/Hermes function description: ``{"type": "function", "function": {name, description, ...}}``."""
        fields = {"name": self.name, "description": self.description, "parameters": self.parameters}
        return {"type": "function", "function": fields}

    def __call__(self, arguments: Any) -> str:
        """Checks ``arguments`` (a dict of decoded JSON), calls the function, returns its result as text.

        Never raises: a bad argument or an exception in the function is returned as ``error: ...``.
        """
        error = f"{ERROR_PREFIX}{self.name}: "
        if not isinstance(arguments, dict):
            return f"{error}arguments must be a JSON object, got {_describe(arguments)}"
        extra = sorted(set(arguments) - set(self.types))
        missing = [p for p in self.parameters.get("required", []) if p not in arguments]
        if extra or missing:
            problems = [f"unexpected argument {e!r}" for e in extra] + [f"missing argument {m!r}" for m in missing]
            return f"{error}{'; '.join(problems)} (parameters: {', '.join(self.types) or 'none'})"
        kwargs = {}
        for key, value in arguments.items():
            try:
                kwargs[key] = convert(value, self.types[key])
            except _Mismatch:
                expected = _schema_name(json_type_schema(self.types[key]))
                return f"{error}argument {key!r} must be {expected}, got {_describe(value)}"
        try:
            result = self.fn(**kwargs)
        except ToolError as err:
            return f"{error}{err}"
        except Exception as err:  # noqa: BLE001 - the model sees the failure; the run goes on
            return f"{error}{type(err).__name__}: {err}"
        if result is None or isinstance(result, str):
            return result or ""
        try:
            return json.dumps(result) if isinstance(result, (dict, list)) else str(result)
        except (TypeError, ValueError):
            return str(result)
