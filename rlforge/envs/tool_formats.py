"""How tool calls are written in a model turn and how results come back: ``ToolCallFormat``, ``HermesFormat``.

The default, ``HermesFormat``, is the Hermes/Qwen convention. A model turn that calls a tool is::

    <tool_call>{"name": "calculator", "arguments": {"expression": "347 * 23"}}</tool_call>

(then EOS, like every turn; several ``<tool_call>`` blocks in one turn are several calls, run in order), and the
environment answers with one observation of role ``tool``::

    <tool_response>7981</tool_response>

It is the format the chat templates of Qwen2.5/Qwen3 (and Hermes-style templates) use for tool calls and tool
messages, so a model trained on them starts with a prior for it. With ``module.chat_template: true`` those
templates wrap a ``tool`` message in ``<tool_response>`` themselves: use ``HermesFormat(wrap_results=False)``
there so results are not wrapped twice.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from rlforge.envs.base import Observation

_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_SHAPE = 'a tool call is {"name": "<tool>", "arguments": {...}}'


@dataclass
class ToolCall:
    """One call parsed from a model turn.

    Args:
        name: The tool's name (empty when the call could not be read).
        arguments: The decoded JSON arguments.
        error: Why the call could not be read (malformed JSON, wrong shape); the model is told this instead.
    """

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


@runtime_checkable
class ToolCallFormat(Protocol):
    """How a ``ToolEnvironment`` reads tool calls and writes results (implement these three methods)."""

    def parse(self, action: str) -> list[ToolCall]:
        """The tool calls in a model turn, in order; empty when the turn calls no tool (a final answer)."""
        ...

    def format_results(self, results: Sequence[str]) -> Observation:
        """The observation that answers one turn's calls (one result per call, in order)."""
        ...

    def render_tools(self, schemas: Sequence[dict[str, Any]]) -> str:
        """The tools preamble of the first prompt: how to call, and each tool's JSON schema."""
        ...


class HermesFormat:
    """``<tool_call>{json}</tool_call>`` calls and ``<tool_response>...</tool_response>`` results (Hermes/Qwen).

    A call's JSON is ``{"name": str, "arguments": object}`` (``arguments`` may also be a JSON string of an object,
    as some models write it). A call whose JSON is malformed, or a ``<tool_call>`` left open, is still a call: it
    comes back as a ``ToolCall`` with ``error`` set, which the environment answers with an ``error: ...`` result.

    Args:
        wrap_results: Wrap each result in ``<tool_response>...</tool_response>``; turn off when the tokenizer's
            chat template wraps ``tool`` messages itself (``module.chat_template: true`` with Qwen models).
    """

    def __init__(self, wrap_results: bool = True) -> None:
        self.wrap_results = wrap_results

    def parse(self, action: str) -> list[ToolCall]:
        calls = [self._read(body) for body in _CALL.findall(action)]
        if "<tool_call>" in _CALL.sub("", action):
            calls.append(ToolCall("", error="<tool_call> is not closed; end the call with </tool_call>"))
        return calls

    @staticmethod
    def _read(body: str) -> ToolCall:
        try:
            call = json.loads(body)
        except json.JSONDecodeError as err:
            return ToolCall("", error=f"invalid JSON in <tool_call>: {err.msg} (char {err.pos}); {_SHAPE}")
        if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not call["name"]:
            return ToolCall("", error=f"no tool name in <tool_call>; {_SHAPE}")
        arguments = call.get("arguments", {})
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError:
                pass
        if not isinstance(arguments, dict):
            return ToolCall(call["name"], error=f"the arguments of {call['name']!r} must be a JSON object; {_SHAPE}")
        return ToolCall(call["name"], arguments)

    def format_results(self, results: Sequence[str]) -> Observation:
        if self.wrap_results:
            return Observation("\n".join(f"<tool_response>{r}</tool_response>" for r in results), role="tool")
        return Observation("\n".join(results), role="tool")

    def render_tools(self, schemas: Sequence[dict[str, Any]]) -> str:
        listing = "\n".join(json.dumps(schema) for schema in schemas)
        return (
            "You can call these tools, described by the JSON schemas between <tools> and </tools>:\n"
            f"<tools>\n{listing}\n</tools>\n"
            'To call one, write <tool_call>{"name": "<tool name>", "arguments": {<arguments as JSON>}}</tool_call> '
            "and stop; the result comes back between <tool_response> and </tool_response>."
        )

    def __repr__(self) -> str:
        return f"HermesFormat(wrap_results={self.wrap_results})"
