"""GuessNumberEnvironment: higher/lower hints, reward 1 on the hidden number, 0 after max_turns."""

from __future__ import annotations

import pytest

from rlforge.data.tasks import make_task
from rlforge.envs import LocalEnvRunner
from rlforge.envs.guess import HIGHER, INVALID, LOWER, GuessNumberEnvironment, parse_guess
from rlforge.errors import ConfigError

ROW = {"prompt": "Q: Guess my number from 1 to 50.\nA:", "target": "37"}


def _play(env: GuessNumberEnvironment, row: dict, guesses: list[str]) -> list:
    episode = env.spawn()
    assert episode.reset(row, seed=0).text == row["prompt"]
    return [episode.step(g) for g in guesses]


def test_hints_point_to_the_hidden_number_and_the_right_guess_wins() -> None:
    results = _play(GuessNumberEnvironment(max_turns=6), ROW, [" 25", " 40", "31", " 37"])
    assert [r.observation.text for r in results[:3]] == [HIGHER, LOWER, HIGHER]
    assert all(r.reward == 0.0 and not r.done and r.observation.role == "user" for r in results[:3])
    last = results[-1]
    assert last.done and last.reward == 1.0 and last.info["success"] is True and last.observation is None


def test_max_turns_ends_the_episode_with_reward_zero() -> None:
    results = _play(GuessNumberEnvironment(max_turns=3), ROW, [" 1", " 2", " 3"])
    assert [r.done for r in results] == [False, False, True]
    assert results[-1].reward == 0.0 and results[-1].info["success"] is False
    # the hidden number on the last allowed turn still wins
    assert _play(GuessNumberEnvironment(max_turns=2), ROW, [" 1", " 37"])[-1].reward == 1.0


def test_malformed_guess_gets_an_observation_and_costs_a_turn() -> None:
    results = _play(GuessNumberEnvironment(max_turns=3), ROW, ["twenty", " 12 13", " 37"])
    assert [r.observation.text for r in results[:2]] == [INVALID, INVALID]
    assert results[0].info["valid"] is False and results[-1].reward == 1.0
    assert parse_guess(" 25") == 25 and parse_guess("25.") == 25 and parse_guess(" 2 5") is None
    assert parse_guess("") is None and parse_guess("#### 25") is None


def test_episodes_are_independent_copies_of_the_template() -> None:
    template = GuessNumberEnvironment()
    first, second = template.spawn(), template.spawn()
    first.reset(ROW, 0)
    second.reset({**ROW, "target": "3"}, 0)
    assert first.step(" 10").observation.text == HIGHER and second.step(" 10").observation.text == LOWER
    assert template.turns == 0


def test_bad_rows_and_arguments() -> None:
    runner = LocalEnvRunner(GuessNumberEnvironment(high=50))
    (out_of_range, not_a_number) = runner.reset([0, 1], [{**ROW, "target": "51"}, {**ROW, "target": "x"}], [0, 0])
    assert out_of_range.done and "outside low..high = 1..50" in out_of_range.info["error"]
    assert "integer `target`" in not_a_number.info["error"]
    with pytest.raises(ConfigError, match="module.environment.low"):
        GuessNumberEnvironment(low=10, high=5)
    with pytest.raises(ConfigError, match="max_turns"):
        GuessNumberEnvironment(max_turns=0)


def test_bisection_finds_every_number_of_the_task_within_six_turns() -> None:
    splits = make_task("guess_number")
    for row in splits.train + splits.val:
        env, lo, hi = GuessNumberEnvironment(max_turns=6).spawn(), 1, 50
        env.reset(row, 0)
        for _ in range(6):
            guess = (lo + hi) // 2
            result = env.step(f" {guess}")
            if result.done:
                break
            lo, hi = (guess + 1, hi) if result.observation.text == HIGHER else (lo, guess - 1)
        assert result.reward == 1.0, row
