"""``env_switch``: the one reading of rlforge's environment switches (``RLFORGE_ONEDNN``, ``RLFORGE_CPU_KERNELS``)."""

from __future__ import annotations

import warnings

import pytest

from rlforge.generation.switches import env_switch


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ("1", True),
        ("true", True),
        (" On ", True),
        ("0", False),
        ("FALSE", False),
        ("off", False),
        ("auto", None),
        ("", None),
        (None, None),
    ],
)
def test_values(setting, expected):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # none of these warns
        assert env_switch("RLFORGE_X", setting) is expected


def test_other_values_warn_with_the_name_and_count_as_auto():
    with pytest.warns(UserWarning, match=r"^RLFORGE_X='yes please' is not 1, 0 or auto: using auto$"):
        assert env_switch("RLFORGE_X", "yes please") is None
