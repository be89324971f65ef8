"""``ToolEnvironment``: the model may call tools for a few turns, then gives a ``#### <answer>`` graded on the row.

An episode, with the default ``HermesFormat`` and the ``calculator`` tool::

    prompt      Q: What is 347 * 23?\\nA:
    model       <tool_call>{"name": "calculator", "arguments": {"expression": "347 * 23"}}</tool_call>
    tool        <tool_response>7981</tool_response>
    model        #### 7981          -> reward 1.0, success, done

A turn with tool calls gets reward 0 and the calls' results as the next observation (role ``tool``); a turn
without one is the final answer: reward 1.0 (and ``success``) iff its ``####`` answer equals the row's ``target``,
and the episode ends. After ``max_turns`` model turns the episode ends anyway (a last tool-call turn's reward, 0,
is the episode's). A malformed call, an unknown tool, bad arguments or a failing tool is answered with an
``error: ...`` result: it costs the model a turn, never the run.

YAML::

    module:
      class_path: rlforge.GRPOModule
      init_args:
        environment:
          class_path: rlforge.envs.ToolEnvironment
          init_args: {tools: [rlforge.envs.tools.calculator, rlforge.envs.tools.python], max_turns: 4}
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

from rlforge.data.tasks import ANSWER_MARKER, extract_answer
from rlforge.envs.base import Environment, Observation, StepResult
from rlforge.envs.tool_formats import HermesFormat, ToolCall, ToolCallFormat
from rlforge.envs.tool_schema import ERROR_PREFIX, Tool
from rlforge.envs.tools import calculator
from rlforge.errors import ConfigError, DataError

_FIELD = "module.environment"


class ToolEnvironment(Environment):
    """Multi-turn episodes in which the model may call Python tools before answering.

    Args:
        tools: The tools: typed functions with Google-style docstrings (or ``Tool`` objects); import paths in
            YAML (``rlforge.envs.tools.calculator``, ``rlforge.envs.tools.python``).
        tool_format: How calls are written and results returned; ``None``: ``HermesFormat()`` (``<tool_call>`` /
            ``<tool_response>``). Not a ``lazy_instance`` default, so the environment pickles (env actors).
        max_turns: Model turns per episode (tool-call turns and the answer).
        timeout_s: Time limit of one turn's tool calls together; past it the episode ends with reward 0 and
            counts in ``env/errors`` (keep it above the ``python`` tool's own 10 s).
        reward_mode: ``final`` (the answer's reward) or ``sum`` (the same here: tool-call turns give 0).
        tools_in_prompt: Put the tools preamble (how to call, each tool's JSON schema) before the first prompt;
            off by default (small policies learn the format from SFT data, and the preamble costs tokens).
    """

    def __init__(
        self,
        tools: Sequence[Callable] = (calculator,),
        tool_format: ToolCallFormat | None = None,
        max_turns: int = 4,
        timeout_s: float = 30.0,
        reward_mode: str = "final",
        tools_in_prompt: bool = False,
    ) -> None:
        super().__init__(max_turns=max_turns, timeout_s=timeout_s, reward_mode=reward_mode)
        if isinstance(tools, (str, bytes)) or not isinstance(tools, Sequence):
            raise ConfigError(f"{_FIELD}.tools must be a list of callables, got {type(tools).__name__}")
        tool_format = HermesFormat() if tool_format is None else tool_format
        if not isinstance(tool_format, ToolCallFormat):
            raise ConfigError(
                f"{_FIELD}.tool_format must have parse, format_results and render_tools "
                f"(e.g. rlforge.envs.HermesFormat), got {type(tool_format).__name__}"
            )
        self.tools: dict[str, Tool] = {}
        for fn in tools:
            tool = Tool.from_function(fn, where=f"{_FIELD}.tools")
            if tool.name in self.tools:
                raise ConfigError(f"{_FIELD}.tools has two tools named {tool.name!r}")
            self.tools[tool.name] = tool
        self.tool_format, self.tools_in_prompt = tool_format, tools_in_prompt
        self.target: str | None = None

    def spawn(self) -> ToolEnvironment:
        """A copy for one episode; the tools are stateless and shared (a per-episode target is all that changes)."""
        return copy.copy(self)

    def preamble(self) -> str:
        """The tools preamble (``tools_in_prompt``): the format's instructions and schemas, and the answer format."""
        schemas = [tool.schema() for tool in self.tools.values()]
        answer = f"When you know the answer, write {ANSWER_MARKER} followed by it."
        return f"{self.tool_format.render_tools(schemas)}\n{answer}"

    def reset(self, row: dict[str, Any], seed: int) -> Observation:
        """The row's ``prompt`` (after the preamble when ``tools_in_prompt``); ``seed`` is unused (no randomness)."""
        prompt = row.get("prompt")
        if not isinstance(prompt, str):
            raise DataError(f"ToolEnvironment needs a text 'prompt' in each row; got fields {sorted(row)}")
        target = row.get("target")
        self.target = None if target is None else str(target).strip()
        return Observation(f"{self.preamble()}\n\n{prompt}" if self.tools_in_prompt else prompt)

    def step(self, action: str) -> StepResult:
        """Runs the turn's tool calls (reward 0, not done), or grades its final answer (done)."""
        calls = self.tool_format.parse(action)
        if calls:
            results = [self.call(c) for c in calls]
            errors = sum(result.startswith(ERROR_PREFIX) for result in results)
            info = {"tool_calls": len(calls), "tool_errors": errors}
            return StepResult(self.tool_format.format_results(results), reward=0.0, done=False, info=info)
        answer = extract_answer(action)
        success = answer is not None and answer == self.target
        return StepResult(None, reward=float(success), done=True, info={"success": success})

    def call(self, call: ToolCall) -> str:
        """One call's result: the tool's output, or ``error: ...`` (unreadable call, unknown tool, bad arguments)."""
        if call.error is not None:
            return f"{ERROR_PREFIX}{call.error}"
        tool = self.tools.get(call.name)
        if tool is None:
            return f"{ERROR_PREFIX}unknown tool {call.name!r}; the tools are: {', '.join(self.tools)}"
        return tool(call.arguments)
