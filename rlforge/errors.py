"""The one exception module: every user-facing error names the field or file and the fix."""

from __future__ import annotations


class RLForgeError(Exception):
    """Base class of every error rlforge raises on purpose."""


class ConfigError(RLForgeError, ValueError):
    """A configuration value is invalid (names the field and what is allowed)."""


class DataError(RLForgeError, ValueError):
    """A dataset row or file is malformed (names the file, row and field)."""


class RewardError(RLForgeError, RuntimeError):
    """Reward functions failed on more than the allowed fraction of samples."""


class MissingDependencyError(RLForgeError, ImportError):
    """An optional extra is needed; the message carries the pip command."""


class CheckpointError(RLForgeError, RuntimeError):
    """A checkpoint cannot be found, read or matched to the current run."""


class NonFiniteError(RLForgeError, FloatingPointError):
    """Training produced NaN/inf values too many steps in a row."""


class WorkerError(RLForgeError, RuntimeError):
    """A remote worker (Monarch actor) failed a call or did not answer in time; carries its traceback."""


class WorkerDiedError(WorkerError):
    """A remote worker's process died (killed, crashed, out of memory)."""
