"""``MonarchStrategy`` and its plumbing: spawning and placement (``mesh``, ``placement``), the actors, and the
actor-backed proxies that implement the service protocols (``RemoteGenerator``, ``RemoteReference``,
``RemoteRewardRunner``, ``RemoteEnvRunner``). Importing this package does not import monarch; building the services
does."""

from rlforge.strategies.monarch.config import ServiceConfig
from rlforge.strategies.monarch.strategy import MonarchStrategy

__all__ = ["MonarchStrategy", "ServiceConfig"]
