"""Optional extras: availability flags and the one error a missing extra raises."""

from __future__ import annotations

from lightning_utilities.core.imports import RequirementCache

from rlforge.errors import MissingDependencyError

# `vllm-cpu` installs the `vllm` module under another distribution name; `module=` accepts either.
_VLLM_AVAILABLE = RequirementCache("vllm", module="vllm")
_TITAN_AVAILABLE = RequirementCache("torchtitan", module="torchtitan")
_PEFT_AVAILABLE = RequirementCache("peft>=0.21", module="peft")
_OPENENV_AVAILABLE = RequirementCache("openenv-core>=0.3,<0.4", module="openenv")

_EXTRAS = {
    "vllm": (
        _VLLM_AVAILABLE,
        "pip install 'rlforge[vllm]'",
        "CPU test env: `bash scripts/make_vllm_cpu_env.sh`",
    ),
    "titan": (
        _TITAN_AVAILABLE,
        "pip install 'rlforge[titan]'",
        "CPU test env: `bash scripts/make_titan_env.sh`",
    ),
    "peft": (_PEFT_AVAILABLE, "pip install 'rlforge[peft]'", "LoRA and other adapters"),
    "openenv": (_OPENENV_AVAILABLE, "pip install 'rlforge[openenv]'", "OpenEnv environments"),
}


def require(extra: str, feature: str) -> None:
    """Raises ``MissingDependencyError`` naming the pip command when ``extra`` is not installed.

    Args:
        extra: ``vllm``, ``titan``, ``peft`` or ``openenv`` (an extra of rlforge's pyproject).
        feature: What needs it, e.g. ``"LocalStrategy(generator='vllm')"``.
    """
    available, pip_command, hint = _EXTRAS[extra]
    if not available:
        status = str(available).split(". HINT")[0]  # our pip command replaces RequirementCache's generic hint
        raise MissingDependencyError(f"{feature} needs the `{extra}` extra: `{pip_command}` ({hint}); {status}")
