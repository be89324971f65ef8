"""``StepMetrics``: the one path from ``log`` calls to the loggers, each metric reduced the way it asks."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from rlforge.metrics import Reduce, StepReducer, reduction_of
from rlforge.parallel import all_gather_objects, is_distributed


class StepMetrics:
    """Collects the values logged during a step and reduces them when the step ends.

    A value carries its reduction (``Reduce.MEAN``/``SUM``/``MAX``/``LAST``; default: the name's registration
    in ``rlforge.metrics``, else mean). Values logged after the step's flush (decisions callbacks take in
    ``on_train_step_end``) go straight to the loggers at that step.

    Args:
        loggers: Where reduced metrics go.
        latest: A dict updated with every value sent (the trainer's ``callback_metrics``).
    """

    def __init__(self, loggers: Sequence[Any], latest: dict[str, float]) -> None:
        self.loggers, self.latest = loggers, latest
        self._values: dict[str, list[float]] = defaultdict(list)
        self._weights: dict[str, list[float]] = defaultdict(list)
        self._reduce: dict[str, str] = {}
        self._reducer = StepReducer()  # one per run: its aggregators are reused step after step
        self._flushed_step: int | None = None

    def open(self) -> None:
        """Starts collecting a new step."""
        self._flushed_step = None

    def record(self, name: str, value: float, reduce: Reduce | str | None = None, weight: float = 1.0) -> None:
        """Logs ``value`` under ``name`` for the current step; ``weight`` counts it in a mean (e.g. its tokens)."""
        if reduce is not None:
            self._reduce[name] = str(Reduce(reduce))
        if self._flushed_step is not None:
            self._send({name: float(value)}, self._flushed_step)
            return
        self._values[name].append(float(value))
        self._weights[name].append(float(weight))

    def flush(self, step: int) -> dict[str, float]:
        """Reduces what was logged, sends it to the loggers as ``step`` and returns it.

        With several ranks each reduction is over every rank's values (torchmetrics syncs in ``compute``, a
        collective): the ranks first agree on the names logged anywhere, so each computes the same metrics in
        the same order, contributing nothing where it logged nothing.
        """
        logged = {name: self._reduce.get(name) or reduction_of(name) for name, values in self._values.items() if values}
        if is_distributed():
            for other in all_gather_objects(logged):
                for name, reduce in other.items():
                    logged.setdefault(name, reduce)
            logged = dict(sorted(logged.items()))
        metrics = {}
        for name, reduce in logged.items():
            value = self._reducer.reduce(name, self._values.get(name, []), reduce, self._weights.get(name, []))
            if value is not None:
                metrics[name] = value
        self._values, self._weights = defaultdict(list), defaultdict(list)
        self._flushed_step = step
        self._send(metrics, step)
        return metrics

    def logged(self, prefix: str = "") -> dict[str, float]:
        """The newest value of each metric logged this step so far whose name starts with ``prefix``."""
        return {name: values[-1] for name, values in self._values.items() if values and name.startswith(prefix)}

    def discard(self) -> None:
        """Drops values logged outside a step (``train_step`` used on its own)."""
        self._values, self._weights = defaultdict(list), defaultdict(list)

    def _send(self, metrics: dict[str, float], step: int) -> None:
        self.latest.update(metrics)
        if metrics:
            for logger in self.loggers:
                logger.log_metrics(dict(metrics), step)
