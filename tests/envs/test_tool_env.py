"""HermesFormat and ToolEnvironment: parsing, scripted episodes through the real runner and episode loop, fit, YAML."""

from __future__ import annotations

import json
import pickle
import time

import pytest
import yaml

from rlforge.envs import (
    HermesFormat,
    LocalEnvRunner,
    Observation,
    ToolCall,
    ToolCallFormat,
    ToolEnvironment,
    calculator,
    episode_metrics,
    python,
    run_episodes,
)
from rlforge.errors import ConfigError
from rlforge.generation.params import SamplingParams
from rlforge.types import Completion
from tests.helpers import metric_rows

CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "347 * 23"}}</tool_call>'  # the pinned form
ROW = {"prompt": "Q: What is 347 * 23?\nA:", "target": "7981"}


def test_hermes_parses_the_pinned_call_and_several_calls():
    fmt = HermesFormat()
    assert isinstance(fmt, ToolCallFormat)
    assert fmt.parse(CALL) == [ToolCall("calculator", {"expression": "347 * 23"})]
    assert fmt.parse(" #### 7981") == [] and fmt.parse("no tags here") == []
    two = 'Let me see. <tool_call>\n{"name": "a", "arguments": {}}\n</tool_call> <tool_call>{"name": "b"}</tool_call>'
    assert fmt.parse(two) == [ToolCall("a", {}), ToolCall("b", {})]
    # Some models write the arguments as a JSON string.
    assert fmt.parse('<tool_call>{"name": "a", "arguments": "{\\"x\\": 1}"}</tool_call>') == [ToolCall("a", {"x": 1})]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("<tool_call>{oops</tool_call>", "invalid JSON in <tool_call>: Expecting property name"),
        ("<tool_call></tool_call>", "invalid JSON in <tool_call>: Expecting value"),
        ('<tool_call>["calculator"]</tool_call>', "no tool name"),
        ('<tool_call>{"arguments": {}}</tool_call>', "no tool name"),
        ('<tool_call>{"name": "a", "arguments": [1]}</tool_call>', "must be a JSON object"),
        ('<tool_call>{"name": "calculator", "arguments": {}}', "is not closed"),
    ],
)
def test_hermes_malformed_calls_are_calls_with_an_error(text, needle):
    (call,) = HermesFormat().parse(text)
    assert call.error is not None and needle in call.error


def test_hermes_results_and_preamble():
    assert HermesFormat().format_results(["7981"]) == Observation("<tool_response>7981</tool_response>", role="tool")
    assert (
        HermesFormat().format_results(["1", "2"]).text
        == "<tool_response>1</tool_response>\n<tool_response>2</tool_response>"
    )
    assert HermesFormat(wrap_results=False).format_results(["7981"]) == Observation("7981", role="tool")
    env = ToolEnvironment(tools=[calculator, python], tools_in_prompt=True)
    text = env.spawn().reset(ROW, seed=0).text
    assert text.endswith("\n\n" + ROW["prompt"])
    listing = text[text.index("<tools>\n") + len("<tools>\n") : text.index("\n</tools>")]
    schemas = [json.loads(line) for line in listing.splitlines()]
    assert [s["function"]["name"] for s in schemas] == ["calculator", "python"]
    assert schemas[0]["function"]["parameters"]["required"] == ["expression"]
    assert ToolEnvironment().spawn().reset(ROW, seed=0).text == ROW["prompt"]  # tools_in_prompt is off by default


def test_scripted_episode_through_the_runner():
    runner = LocalEnvRunner(ToolEnvironment(max_turns=4))
    (start,) = runner.reset([0], [ROW], [0])
    assert start.observation == Observation(ROW["prompt"])
    (tool_turn,) = runner.step([0], [CALL])
    assert tool_turn.observation == Observation("<tool_response>7981</tool_response>", role="tool")
    assert (tool_turn.reward, tool_turn.done, tool_turn.info["tool_calls"]) == (0.0, False, 1)
    bad = '<tool_call>{"name": "calc", "arguments": {}}</tool_call><tool_call>{"name": "calculator", "arguments": {"expr": "1"}}</tool_call>'  # noqa: E501
    (error_turn,) = runner.step([0], [bad])
    assert error_turn.observation.text == (
        "<tool_response>error: unknown tool 'calc'; the tools are: calculator</tool_response>\n"
        "<tool_response>error: calculator: unexpected argument 'expr'; missing argument 'expression' "
        "(parameters: expression)</tool_response>"
    )
    assert error_turn.info["tool_calls"] == 2 and error_turn.info["tool_errors"] == 2 and "error" not in error_turn.info
    (answer,) = runner.step([0], ["The answer is #### 7,981"])
    assert (answer.observation, answer.reward, answer.done, answer.info["success"]) == (None, 1.0, True, True)
    runner.close([0])

    runner.reset([1, 2], [ROW, {"prompt": "Q?", "target": 5}], [0, 0])
    wrong, right = runner.step([1, 2], [" #### 7982", " #### 5"])
    assert (wrong.reward, wrong.done, wrong.info["success"]) == (0.0, True, False)
    assert (right.reward, right.info["success"]) == (1.0, True)  # an integer target compares as text
    (no_answer,) = runner.step([3], ["x"])  # no such episode: the runner's failure, not an exception
    assert no_answer.done and "error" in no_answer.info


def test_reset_without_prompt_and_a_slow_tool_end_only_their_episode():
    def slow(seconds: float) -> str:
        """Sleeps."""
        time.sleep(seconds)
        return "done"

    runner = LocalEnvRunner(ToolEnvironment(tools=[slow], timeout_s=0.5))
    failed, ok = runner.reset([0, 1], [{"question": "?"}, ROW], [0, 0])
    assert failed.done and "DataError" in failed.info["error"] and "'prompt'" in failed.info["error"]
    (late,) = runner.step([1], ['<tool_call>{"name": "slow", "arguments": {"seconds": 3}}</tool_call>'])
    assert late.done and late.reward == 0.0 and "timeout_s=0.5" in late.info["error"]


def test_environment_pickles_for_env_actors():
    env = pickle.loads(pickle.dumps(ToolEnvironment(tools=[calculator, python], max_turns=2)))
    assert env.max_turns == 2 and list(env.tools) == ["calculator", "python"]
    env.reset(ROW, seed=0)
    assert env.step(CALL).observation.text == "<tool_response>7981</tool_response>"


def test_config_errors_name_the_field():
    def untyped(x):
        return x

    with pytest.raises(ConfigError, match=r"^module\.environment\.tools: tool 'untyped' parameter 'x'"):
        ToolEnvironment(tools=[untyped])
    with pytest.raises(ConfigError, match="two tools named 'calculator'"):
        ToolEnvironment(tools=[calculator, calculator])
    with pytest.raises(ConfigError, match=r"module\.environment\.tool_format must have parse"):
        ToolEnvironment(tool_format="hermes")
    with pytest.raises(ConfigError, match=r"module\.environment\.max_turns"):
        ToolEnvironment(max_turns=0)


class _CharEncoder:
    """One token per character, so expected token ids are easy to write down."""

    def prompt(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    def observation(self, obs: Observation) -> list[int]:
        return [ord(c) for c in obs.text]

    def decode(self, ids: list[int]) -> str:
        return "".join(map(chr, ids))


class _ScriptedGenerator:
    """Answers each episode (known by its prompt) with the next turn of its script."""

    def __init__(self, scripts: dict[str, list[str]]) -> None:
        self.scripts, self.turns = scripts, dict.fromkeys(scripts, 0)

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[list[Completion]]:
        out = []
        for ids in prompts:
            prompt = next(p for p in self.scripts if "".join(map(chr, ids)).startswith(p))
            text = self.scripts[prompt][self.turns[prompt]]
            self.turns[prompt] += 1
            out.append([Completion(text=text, token_ids=[ord(c) for c in text], logprobs=[-0.5] * len(text))])
        return out


def test_scripted_episodes_through_the_episode_loop():
    malformed = "<tool_call>{oops</tool_call>"
    scripts = {
        "A:": [CALL, " #### 7981"],  # calls the tool, then answers right
        "B:": [" #### 5"],  # answers wrong at once
        "C:": [CALL, CALL, CALL],  # never answers: max_turns ends it with the last tool turn's reward 0
        "D:": [malformed, " #### 3"],  # a malformed call is still a call; then the right answer
    }
    rows = [{"prompt": "A:", "target": "7981"}, {"prompt": "B:", "target": "4"}]
    rows += [{"prompt": "C:", "target": "7981"}, {"prompt": "D:", "target": "3"}]
    groups = run_episodes(
        rows,
        1,
        _ScriptedGenerator(scripts),
        LocalEnvRunner(ToolEnvironment(max_turns=3)),
        _CharEncoder(),
        SamplingParams(max_new_tokens=100),
        seeds=[0, 1, 2, 3],
    )
    logged = {name: value for name, (value, _) in episode_metrics(groups).items()}
    a, b, c, d = (group[0] for group in groups)
    assert [(e.reward, e.success, e.turns, e.tool_calls) for e in (a, b, c, d)] == [
        (1.0, True, 2, 1),
        (0.0, False, 1, 0),
        (0.0, False, 3, 3),
        (1.0, True, 2, 1),
    ]
    response = "<tool_response>7981</tool_response>"
    assert a.completion.text == CALL + response + " #### 7981"
    assert a.completion.loss_mask == [1] * len(CALL) + [0] * len(response) + [1] * len(" #### 7981")
    assert d.completion.text.startswith(malformed + "<tool_response>error: invalid JSON in <tool_call>")
    assert logged["env/errors"] == 0 and logged["rollout/tool_calls_mean"] == pytest.approx(5 / 4)
    assert logged["rollout/tool_errors_mean"] == pytest.approx(1 / 4)  # D's malformed call


def test_fit_two_steps_on_the_default_policy(tmp_path):
    import rlforge

    module = rlforge.GRPOModule(
        group_size=3, sampling=rlforge.SamplingParams(max_new_tokens=6), environment=ToolEnvironment(max_turns=3)
    )
    trainer = rlforge.RLTrainer(
        max_steps=2, enable_progress_bar=False, val_check_interval=0, default_root_dir=str(tmp_path)
    )
    trainer.fit(module, rlforge.RLDataModule(batch_size=2, val_size=4))
    rows = metric_rows(tmp_path, "env/errors")
    assert len(rows) == 2 and all(float(row["env/errors"]) == 0 for row in rows)
    assert all(row["rollout/tool_calls_mean"] and row["rollout/turns_mean"] and row["train/loss"] for row in rows)


def test_yaml_tools_by_import_path_through_the_cli(tiny_policy_dir, tmp_path, capsys):
    from rlforge.cli import main

    config = {
        "module": {
            "class_path": "rlforge.GRPOModule",
            "init_args": {
                "model": tiny_policy_dir,
                "group_size": 2,
                "sampling": {"max_new_tokens": 5},
                "environment": {
                    "class_path": "rlforge.envs.ToolEnvironment",
                    "init_args": {"tools": ["rlforge.envs.tools.calculator", "rlforge.envs.tools.python"]},
                },
            },
        },
        "trainer": {"max_steps": 2, "enable_progress_bar": False, "val_check_interval": 0},
        "data": {"batch_size": 2},
    }
    path = tmp_path / "tools.yaml"
    path.write_text(yaml.safe_dump(config))

    def cli(*args: str) -> tuple[int, str, str]:
        try:
            main(["fit", "--config", str(path), "--trainer.default_root_dir", str(tmp_path / "run"), *args])
            code = 0
        except SystemExit as exit_:
            code = int(exit_.code or 0)
        out = capsys.readouterr()
        return code, out.out, out.err

    code, printed, _ = cli("--print_config")
    assert code == 0
    env = yaml.safe_load(printed)["module"]["init_args"]["environment"]
    assert env["class_path"] == "rlforge.envs.ToolEnvironment"
    assert env["init_args"]["tools"] == ["rlforge.envs.tools.calculator", "rlforge.envs.tools.python"]
    assert env["init_args"]["tool_format"] is None  # HermesFormat()

    assert cli()[0] == 0
    rows = metric_rows(tmp_path / "run", "env/errors")
    assert len(rows) == 2 and all(float(row["env/errors"]) == 0 for row in rows)

    hermes = {"class_path": "rlforge.envs.HermesFormat", "init_args": {"wrap_results": False}}
    config["module"]["init_args"]["environment"]["init_args"]["tool_format"] = hermes
    path.write_text(yaml.safe_dump(config))
    code, printed, _ = cli("--print_config")
    assert (
        code == 0
        and yaml.safe_load(printed)["module"]["init_args"]["environment"]["init_args"]["tool_format"] == hermes
    )

    config["module"]["init_args"]["environment"]["init_args"]["tools"] = ["rlforge.envs.tools.nope"]
    path.write_text(yaml.safe_dump(config))
    code, _, err = cli("--print_config")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith("rlforge: error: module.environment.tools") and "nope" in err


def test_module_docstring_example_matches():
    """The episode in tool_env's docstring, step by step."""
    env = ToolEnvironment().spawn()
    assert env.reset(ROW, seed=0).text == ROW["prompt"]
    assert env.step(CALL).observation.text == "<tool_response>7981</tool_response>"
    assert env.step(" #### 7981").reward == 1.0
