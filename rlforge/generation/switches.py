"""The environment switches of rlforge's CPU fast paths (``RLFORGE_ONEDNN``, ``RLFORGE_CPU_KERNELS``), read one way."""

from __future__ import annotations

import warnings

_ON, _OFF = {"1", "true", "on"}, {"0", "false", "off"}


def env_switch(name: str, setting: str | None) -> bool | None:
    """``True`` for ``1``/``true``/``on``, ``False`` for ``0``/``false``/``off`` (any case), ``None`` (the path's own
    default) when ``setting`` is unset or ``auto``; any other value warns once, naming ``name``, and counts as auto.

    Args:
        name: The variable's name, for the warning.
        setting: Its value (``os.environ.get(name)``).
    """
    value = (setting or "auto").strip().lower()
    if value in _ON:
        return True
    if value in _OFF:
        return False
    if value != "auto":
        warnings.warn(f"{name}={setting!r} is not 1, 0 or auto: using auto", stacklevel=2)
    return None
