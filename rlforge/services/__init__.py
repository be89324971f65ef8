"""Services: the protocols every rollout-side backend implements (generator, reference, scorer), wherever it runs.

``Strategy.build(ctx, module)`` returns a ``Services`` bundle; the trainer and the ``RolloutEngine`` use only it.
See docs/DESIGN.md.
"""

from rlforge.services.bundle import Services, Staleness
from rlforge.services.context import RunContext
from rlforge.services.local import LocalReference, MergingGenerator
from rlforge.services.pending import Done, Pending, submit
from rlforge.services.protocols import Generator, Reference, Scorer

__all__ = [
    "Done",
    "Generator",
    "LocalReference",
    "MergingGenerator",
    "Pending",
    "Reference",
    "RunContext",
    "Scorer",
    "Services",
    "Staleness",
    "submit",
]
