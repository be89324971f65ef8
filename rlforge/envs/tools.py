"""Tools a model can call from a ``ToolEnvironment``: any typed Python function, and two built-ins.

Any function with type-annotated parameters and a Google-style docstring is a tool: ``Tool.from_function``
reads its JSON schema from the signature and docstring, and calling the tool checks the model's arguments first.
In YAML, list tools by import path: ``tools: [rlforge.envs.tools.calculator, mypackage.tools.search]``.

Built-ins:

- ``calculator``: exact arithmetic, evaluated by walking the ``ast`` (never ``eval``); see ``rlforge.envs.arithmetic``.
- ``python``: runs code in a separate, limited interpreter; see ``rlforge.envs.sandbox`` for exactly what is and
  is not isolated. For other limits, write your own tool around ``run_python(code, timeout_s=..., ...)``.
"""

from __future__ import annotations

from rlforge.envs.arithmetic import evaluate, format_number
from rlforge.envs.sandbox import run_python
from rlforge.envs.tool_schema import ERROR_PREFIX, Tool, ToolError, json_type_schema

__all__ = ["ERROR_PREFIX", "Tool", "ToolError", "calculator", "json_type_schema", "python", "run_python"]


def calculator(expression: str) -> str:
    """Evaluates an arithmetic expression exactly.

    Supports integers and decimals with + - * / // % ** and parentheses, e.g. "(347 * 23) / 4".

    Args:
        expression: The arithmetic expression to evaluate.
    """
    return format_number(evaluate(expression))


def python(code: str) -> str:
    """Runs a Python program and returns what it prints; the value of a final expression is printed too.

    No network, no subprocesses; 10 seconds and 1 GiB at most.

    Args:
        code: The Python source code to run.
    """
    return run_python(code)
