"""Tools: schemas from typed functions, argument checking, the exact calculator and the sandboxed python tool."""

from __future__ import annotations

import operator
import os
import time
from fractions import Fraction
from typing import Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlforge.envs.arithmetic import MAX_BITS
from rlforge.envs.sandbox import run_python
from rlforge.envs.tools import Tool, ToolError, calculator, python
from rlforge.errors import ConfigError


def lookup(query: str, limit: int, scale: float = 1.0, exact: bool = False, tags: list[str] | None = None) -> list[str]:
    """Finds entries.

    Longer text about the search.

    Args:
        query: What to look for.
        limit: At most this
            many results.
        scale: A weight.
        exact: Match whole words.
        tags: Only entries with these tags.
    """
    return [query] * limit


def test_schema_from_typed_function():
    tool = Tool.from_function(lookup)
    assert tool.name == "lookup"
    assert tool.description == "Finds entries.\n\nLonger text about the search."
    assert tool.parameters == {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "What to look for."},
            "limit": {"type": "integer", "description": "At most this many results."},
            "scale": {"type": "number", "description": "A weight."},
            "exact": {"type": "boolean", "description": "Match whole words."},
            "tags": {
                "anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}],
                "description": "Only entries with these tags.",
            },
        },
        "required": ["query", "limit"],
    }
    assert tool.schema() == {
        "type": "function",
        "function": {"name": "lookup", "description": tool.description, "parameters": tool.parameters},
    }


def test_schema_of_enums_maps_and_undocumented_parameters():
    def pick(mode: Literal["a", "b"], weights: dict[str, float], items: tuple[int, ...] = ()) -> str:
        return f"{mode}:{sorted(weights.items())}:{items}"

    tool = Tool.from_function(pick)
    assert tool.description == ""
    assert tool.parameters["properties"] == {
        "mode": {"type": "string", "enum": ["a", "b"]},
        "weights": {"type": "object", "additionalProperties": {"type": "number"}},
        "items": {"type": "array", "items": {"type": "integer"}},
    }
    assert tool({"mode": "b", "weights": {"x": 1}, "items": [1, 2]}) == "b:[('x', 1.0)]:(1, 2)"
    assert (
        tool({"mode": "c", "weights": {}}) == 'error: pick: argument \'mode\' must be one of "a", "b", got string "c"'
    )


def untyped(x):
    return x


def varargs(*xs: int) -> int:
    return sum(xs)


def fixed(pair: tuple[int, int]) -> int:
    return sum(pair)


@pytest.mark.parametrize(
    ("fn", "needle"),
    [
        (untyped, "parameter 'x' needs a type annotation"),
        (varargs, "parameter 'xs' must be a named parameter"),
        (fixed, "fixed-length"),
        (lambda x: x, "not a named callable"),
    ],
)
def test_from_function_refuses_what_has_no_json_schema(fn, needle):
    with pytest.raises(ConfigError, match=needle) as err:
        Tool.from_function(fn, where="module.environment.tools")
    assert str(err.value).startswith("module.environment.tools: ")


def test_arguments_are_checked_and_errors_are_returned_not_raised():
    tool = Tool.from_function(lookup)
    assert tool({"query": "q", "limit": 2}) == '["q", "q"]'  # a list result comes back as JSON
    assert tool({"query": "q", "limit": 1, "scale": 2}) == '["q"]'  # an integer is a valid number
    cases = {
        "missing argument 'limit'": {"query": "q"},
        "unexpected argument 'lim'; missing argument 'limit'": {"query": "q", "lim": 1},
        "argument 'limit' must be integer, got string \"2\"": {"query": "q", "limit": "2"},
        "argument 'limit' must be integer, got boolean true": {"query": "q", "limit": True},
        "argument 'limit' must be integer, got number 1.5": {"query": "q", "limit": 1.5},
        "argument 'exact' must be boolean, got integer 1": {"query": "q", "limit": 1, "exact": 1},
        "argument 'tags' must be array or null, got array [1]": {"query": "q", "limit": 1, "tags": [1]},
    }
    for needle, arguments in cases.items():
        assert tool(arguments).startswith(f"error: lookup: {needle}"), arguments
    assert tool(["q", 1]) == 'error: lookup: arguments must be a JSON object, got array ["q", 1]'


def test_exceptions_inside_a_tool_come_back_as_text():
    def fails(kind: str) -> str:
        if kind == "tool":
            raise ToolError("no such city")
        raise KeyError(kind)

    tool = Tool.from_function(fails)
    assert tool({"kind": "tool"}) == "error: fails: no such city"
    assert tool({"kind": "bug"}) == "error: fails: KeyError: 'bug'"


# calculator: exact, checked against Python ints and Fractions on random expression trees.
_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "//": operator.floordiv, "%": operator.mod}
_small_ints = st.integers(-1000, 1000)
_powers = st.tuples(st.integers(-30, 30), st.integers(0, 3)).map(lambda p: (f"(({p[0]})**{p[1]})", p[0] ** p[1]))
_leaves = st.one_of(_small_ints.map(lambda n: (f"({n})" if n < 0 else str(n), n)), _powers)


CALC = Tool.from_function(calculator)


def _combine(children, ops):
    return st.tuples(children, st.sampled_from(ops), children)


def _tree(ops):
    return st.recursive(_leaves, lambda children: _combine(children, ops), max_leaves=12)


def _render(tree, reference):
    """(text, value); value None when Python raises ZeroDivisionError on it."""
    if len(tree) == 2:
        return tree[0], reference(tree[1])
    (left, lv), op, (right, rv) = _render(tree[0], reference), tree[1], _render(tree[2], reference)
    if lv is None or rv is None:
        return f"({left} {op} {right})", None
    try:
        return f"({left} {op} {right})", (_OPS[op] if op != "/" else operator.truediv)(lv, rv)
    except ZeroDivisionError:
        return f"({left} {op} {right})", None


@settings(max_examples=200, deadline=None)
@given(_tree(list(_OPS)))
def test_calculator_matches_python_integers(tree):
    text, value = _render(tree, int)
    result = CALC({"expression": text})
    if value is None:
        assert result == "error: calculator: division by zero"
    else:
        assert result == str(value), text


@settings(max_examples=120, deadline=None)
@given(_tree([*_OPS, "/"]))
def test_calculator_division_is_exact(tree):
    text, value = _render(tree, Fraction)
    result = CALC({"expression": text})
    if value is None:
        assert result == "error: calculator: division by zero"
    else:
        got = Fraction(result)
        assert got == value or abs(got - value) <= abs(value) * Fraction(1, 10**14), (text, result)


def test_calculator_decimals_are_exact():
    assert calculator("0.1 + 0.2") == "0.3"
    assert calculator("7 / 2") == "3.5"
    assert calculator("1 / 3") == "0.333333333333333"
    assert calculator("2 ** -3") == "0.125"
    assert calculator("-2 ** 2") == "-4"
    assert calculator("1_000 * 1e3") == "1000000"
    assert calculator(" 347 * 23 ") == "7981"


@pytest.mark.parametrize(
    ("expression", "needle"),
    [
        ("9**9**9", "power too large"),
        ("10**10**10", "power too large"),
        ("2**100000", "power too large"),
        ("(2**5000)*(2**5000)*(2**5000)", "too large"),
        ("2**0.5", "exponents must be integers"),
        ("x + 1", "unsupported syntax Name"),
        ("abs(-1)", "unsupported syntax Call"),
        ("__import__('os').system('true')", "unsupported syntax Call"),
        ("(1).real", "unsupported syntax Attribute"),
        ("[1][0]", "unsupported syntax Subscript"),
        ("'a' * 3", "unsupported literal"),
        ("True + 1", "unsupported literal"),
        ("1j", "unsupported literal"),
        ("1 < 2", "unsupported syntax Compare"),
        ("3 & 1", "unsupported operator BitAnd"),
        ("1 / 0", "division by zero"),
        ("5 % (2 - 2)", "division by zero"),
        ("0 ** -1", "division by zero"),
        ("1 +", "invalid expression"),
        ("1" * 1001, "longer than 1000"),
        ("-" * 900 + "1", "nested more than 200 deep"),
        ("+".join(["1"] * 400), "nested more than 200 deep"),
        ("(" * 300 + "1" + ")" * 300, "invalid expression"),
    ],
)
def test_calculator_refuses_and_returns_quickly(expression, needle):
    begin = time.monotonic()
    result = CALC({"expression": expression})
    assert time.monotonic() - begin < 1.0
    assert result.startswith("error: calculator: ") and needle in result, result


def test_calculator_big_results_within_the_bound_are_exact():
    assert calculator("2**9000") == str(2**9000)
    assert len(bin(2**9000)) - 2 <= MAX_BITS


# python: a separate, limited interpreter.
def test_python_prints_output_and_the_last_expression():
    tool = Tool.from_function(python)
    assert tool({"code": "print('hi')\nx = 6\nx * 7"}) == "hi\n42"
    assert tool({"code": "x = 1"}) == ""
    out = tool({"code": "1 / 0"})
    assert out.startswith("Traceback") and out.endswith("ZeroDivisionError: division by zero")
    assert "_sandbox" not in out  # the sandbox's own frame is not shown


def test_python_timeout_kills_the_process():
    begin = time.monotonic()
    out = run_python("import time\nprint('start', flush=True)\ntime.sleep(30)", timeout_s=1)
    assert time.monotonic() - begin < 5
    assert out == "start\nerror: timed out after 1 s"


def test_python_cpu_limit():
    assert run_python("while True: pass", cpu_s=1, timeout_s=20).endswith("error: killed by SIGXCPU (CPU time limit)")


def test_python_memory_limit():
    out = run_python("x = bytearray(2 * 1024**3)\nprint('allocated')", memory_mb=256)
    assert "MemoryError" in out and "allocated" not in out


@pytest.mark.parametrize(
    ("code", "event"),
    [
        ("import socket\nsocket.socket()", "socket.__new__"),
        ("import socket\nsocket.getaddrinfo('localhost', 80)", "socket.getaddrinfo"),
        ("import urllib.request\nurllib.request.urlopen('http://127.0.0.1:9')", "socket."),
        ("import subprocess\nsubprocess.run(['true'])", "subprocess.Popen"),
        ("import os\nos.system('true')", "os.system"),
        ("import os\nos.fork()", "os.fork"),
        ("import os\nos.kill(os.getppid(), 9)", "os.kill"),
        ("import ctypes\nctypes.CDLL('libc.so.6')", "ctypes.dlopen"),
        ("import _posixsubprocess", "import _posixsubprocess"),
        ("import resource\nresource.setrlimit(resource.RLIMIT_CPU, (-1, -1))", "resource.setrlimit"),
    ],
)
def test_python_has_no_network_processes_or_signals(code, event):
    out = run_python(code)
    assert f"PermissionError: {event}" in out, out


def test_python_environment_and_directory_are_fresh(monkeypatch, tmp_path):
    monkeypatch.setenv("RLFORGE_TEST_SECRET", "s3cret")
    out = run_python("import os, sys\nprint(os.environ.get('RLFORGE_TEST_SECRET'), sys.flags.isolated)\nos.getcwd()")
    first, cwd = out.splitlines()
    assert first == "None 1"
    assert "rlforge-python-" in cwd and not os.path.exists(cwd.strip("'"))  # removed afterwards


def test_python_output_is_truncated():
    out = run_python("while True: print('x' * 1000)", max_output=100)
    assert out.startswith("x" * 100 + "\n[... ") and len(out) < 1000
