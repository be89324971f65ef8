"""How callbacks report what they did: a one-line message (metrics go through ``trainer.log``)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from lightning_utilities.core.rank_zero import rank_zero_only

from rlforge.errors import ConfigError

if TYPE_CHECKING:
    import rlforge

log = logging.getLogger("rlforge")


@rank_zero_only
def announce(message: str) -> None:
    """One line on stderr (through the ``rlforge`` logger) for every action a callback takes."""
    log.warning(message)


def require_settable_beta(module: rlforge.RLModule, who: str) -> None:
    """Fails early when ``module.beta`` cannot be changed (a custom module without a setter)."""
    prop = getattr(type(module), "beta", None)
    if not isinstance(prop, property) or prop.fset is None:
        raise ConfigError(f"{who} changes module.beta, but {type(module).__name__}.beta has no setter")
