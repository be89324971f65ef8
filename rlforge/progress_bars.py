"""Third-party progress bars (transformers' weight loading, datasets' download/prepare) kept out of rlforge's output.

Applied where rlforge loads models and data, so the CLI and the Python API (``RLTrainer(...).fit(module)`` in a
script) print the same: rlforge's own progress only. The previous setting is restored afterwards, so a user's
own ``from_pretrained`` calls keep their bars.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def quiet_loading_bars() -> Iterator[None]:
    """Disables transformers' and datasets' progress bars inside the block (each only if installed)."""
    restore = []
    with contextlib.suppress(ImportError):
        from transformers.utils import logging as hf_logging

        if hf_logging.is_progress_bar_enabled():
            hf_logging.disable_progress_bar()
            restore.append(hf_logging.enable_progress_bar)
    with contextlib.suppress(ImportError):
        from datasets.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

        if not are_progress_bars_disabled():
            disable_progress_bars()
            restore.append(enable_progress_bars)
    try:
        yield
    finally:
        for enable in restore:
            enable()
