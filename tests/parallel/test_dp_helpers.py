"""``dp_helpers.first_fatal``: a rank's C++ abort stays in the stderr tail that a failing test quotes."""

from __future__ import annotations

from tests.parallel.dp_helpers import first_fatal


def test_the_first_fatal_error_is_repeated_where_the_tail_shows_it():
    stderr = "\n".join(
        [
            "[rank1]: training step 3",
            "terminate called after throwing an instance of 'gloo::IoException'",
            "  what():  [pair.cc:589] Read error [127.0.0.1]:3977: Connection reset by peer",
            "Fatal Python error: Aborted",
            *(f'  File "module_{i}.py", line {i} in f' for i in range(400)),  # every thread's stack
            "Extension modules: " + ", ".join(f"ext_{i}" for i in range(300)),
        ]
    )
    assert "terminate called" not in stderr[-3000:]
    quoted = (stderr + first_fatal(stderr))[-3000:]
    assert "terminate called after throwing an instance of 'gloo::IoException'" in quoted
    assert "Connection reset by peer" in quoted and "Fatal Python error: Aborted" in quoted


def test_nothing_is_added_without_a_fatal_error():
    assert first_fatal("Traceback (most recent call last):\nValueError: bad config") == ""
