"""MonarchStrategy configuration errors (no processes are started)."""

from __future__ import annotations

import sys

import pytest

pytest.importorskip("monarch", reason="MonarchStrategy tests need the `monarch` extra (in `dev`)")

from rlforge.errors import ConfigError
from rlforge.strategies import MonarchStrategy, ServiceConfig
from rlforge.strategies.monarch import placement


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"generator": ServiceConfig(procs=2)}, "generator.procs must be 1"),
        ({"generator": ServiceConfig(num_replicas=0)}, "generator.num_replicas must be >= 1"),
        ({"reference": ServiceConfig(num_replicas=2)}, "reference: procs and num_replicas must be 1"),
        ({"reward": ServiceConfig(num_replicas=-1)}, "reward.num_replicas must be >= 0"),
        ({"generator": ServiceConfig(backend="tgi")}, r"generator.backend must be one of \('torch', 'vllm'\)"),
        ({"reward": ServiceConfig(num_replicas=1, backend="vllm")}, "reward: backend and options apply to the gen"),
        ({"max_staleness": -1}, "max_staleness must be >= 0"),
        ({"tis_cap": 0.5}, "tis_cap must be >= 1"),
        ({"correction": "magic"}, "correction must be 'tis' or 'ppo'"),
        ({"sync_transport": "smoke"}, "sync_transport must be one of"),
        ({"generator": ServiceConfig(options={"cpu_kernels": "no"})}, "generator.options.cpu_kernels must be true or"),
    ],
)
def test_bad_values_are_one_line_config_errors(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        MonarchStrategy(**kwargs)


def test_generator_backend_is_a_deprecated_alias_of_generator_backend_field():
    with pytest.warns(DeprecationWarning, match="use trainer.strategy.generator.backend"):
        strategy = MonarchStrategy(generator_backend="torch", generator=ServiceConfig(num_replicas=2))
    assert strategy.generator.backend == strategy.generator_backend == "torch"
    assert strategy.generator.num_replicas == 2
    with pytest.raises(ConfigError, match="generator.backend must be one of"), pytest.warns(DeprecationWarning):
        MonarchStrategy(generator_backend="tgi")


def test_placement_errors_name_the_field():
    with pytest.raises(ConfigError, match="trainer.strategy.job is null"):
        placement.host_mesh(None, ServiceConfig(hosts="gen"), 0)
    with pytest.raises(ConfigError, match="no host mesh named 'gen'"):
        placement.host_mesh(object(), ServiceConfig(hosts="gen"), 0)
    with pytest.raises(ConfigError, match="no dumped Monarch job"):
        placement.load_job("/nonexistent/job.pkl")
    assert placement.worker_device(ServiceConfig(), 3) == "cpu"


def test_import_rlforge_does_not_import_monarch():
    import subprocess

    code = "import sys, rlforge, rlforge.strategies; print('monarch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
