"""The titan backend's wiring and its missing-extra error (main env; the backend itself: test_titan_backend.py)."""

from __future__ import annotations

import pytest

from rlforge import GRPOModule
from rlforge.errors import ConfigError, MissingDependencyError
from rlforge.imports import _TITAN_AVAILABLE
from rlforge.models import load_policy
from rlforge.models.loading import BACKENDS

needs_no_titan = pytest.mark.skipif(
    bool(_TITAN_AVAILABLE), reason="torchtitan is installed here, so the missing-extra error cannot occur"
)


def test_backend_names_and_options_are_checked_early():
    assert BACKENDS == ("hf", "titan")
    with pytest.raises(ConfigError, match="module.backend must be one of"):
        GRPOModule(backend="megatron")
    with pytest.raises(ConfigError, match="backend_options only apply to backend 'titan'"):
        GRPOModule(backend_options={"flavor": "1.7B"})


def test_hf_stays_the_default_backend(tiny_policy_dir):
    module = GRPOModule(model=tiny_policy_dir)
    module.configure_model()
    assert module.backend == "hf" and type(module.policy).__name__ == "Qwen3ForCausalLM"


@needs_no_titan
def test_missing_torchtitan_names_the_pip_command(tiny_policy_dir):
    for make in (lambda: GRPOModule(backend="titan"), lambda: load_policy(tiny_policy_dir, backend="titan")):
        with pytest.raises(MissingDependencyError) as err:
            make()
        message = str(err.value)
        assert "pip install 'rlforge[titan]'" in message and "scripts/make_titan_env.sh" in message


@needs_no_titan
def test_missing_torchtitan_is_one_line_from_the_cli(tiny_policy_dir, tmp_path, capsys):
    from rlforge.cli import main
    from tests.helpers import fast_flags

    with pytest.raises(SystemExit) as exit_:
        main(["fit", *fast_flags(tiny_policy_dir, tmp_path), "--module.backend", "titan"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and len(err.strip().splitlines()) == 1
    assert "pip install 'rlforge[titan]'" in err
