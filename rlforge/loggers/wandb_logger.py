"""``WandbLogger``: Weights & Biases, drop-in like Lightning's (works offline with ``WANDB_MODE=offline``)."""

from __future__ import annotations

import secrets
import string
from pathlib import Path
from typing import Any

from lightning_utilities.core.imports import RequirementCache

from rlforge.errors import ConfigError, MissingDependencyError
from rlforge.loggers.base import FolderLogger

_WANDB = RequirementCache("wandb")


class WandbLogger(FolderLogger):
    """Logs metrics, the resolved config, sample tables and (optionally) checkpoints to W&B.

    The run lives in ``<save_dir>/<project>/<run id>/wandb/``; with ``offline`` (or ``WANDB_MODE=offline``)
    nothing goes over the network and ``wandb sync`` uploads it later. W&B's cache, staging and settings
    folders follow ``WANDB_CACHE_DIR``, ``WANDB_DATA_DIR`` and ``WANDB_CONFIG_DIR``.

    Args:
        project: W&B project.
        name: Display name of the run.
        save_dir: Root folder; ``None`` uses the trainer's ``default_root_dir``.
        version: Run id (to resume an online run); ``None`` makes a new one.
        offline: Write the run locally only (same as ``WANDB_MODE=offline``).
        log_model: ``True`` uploads the last checkpoint as a ``model`` artifact when training ends,
            ``"all"`` uploads every checkpoint when it is saved, ``False`` none.
        entity: W&B team or user.
        tags: Run tags.
        group: Run group.
    """

    def __init__(
        self,
        project: str = "rlforge",
        name: str | None = None,
        save_dir: str | None = None,
        version: str | None = None,
        offline: bool = False,
        log_model: bool | str = False,
        entity: str | None = None,
        tags: list[str] | None = None,
        group: str | None = None,
    ) -> None:
        if not _WANDB:
            raise MissingDependencyError(f"WandbLogger needs wandb: pip install 'rlforge[wandb]' ({_WANDB})")
        if log_model not in (True, False, "all"):
            raise ConfigError(f"WandbLogger.log_model must be true, false or 'all', got {log_model!r}")
        self.project, self.name, self.save_dir, self.offline = project, name, save_dir, offline
        self.log_model, self.entity, self.tags, self.group = log_model, entity, tags, group
        alphabet = string.ascii_lowercase + string.digits
        self._resume = "allow" if version else None  # continue a named run; a fresh id never resumes
        self.version = version or "".join(secrets.choice(alphabet) for _ in range(8))
        self._run: Any = None
        self._last_checkpoint: tuple[Path, int] | None = None

    def run_folder(self, default_root_dir: str) -> Path:
        return Path(self.save_dir or default_root_dir) / self.project / self.version

    @property
    def experiment(self) -> Any:
        """The ``wandb`` run, started on first use."""
        if self._run is None:
            import wandb

            self._run = wandb.init(
                project=self.project,
                name=self.name,
                dir=str(self.log_dir),
                id=self.version,
                mode="offline" if self.offline else None,
                entity=self.entity,
                tags=self.tags,
                group=self.group,
                resume=self._resume,
                reinit="finish_previous",
            )
        return self._run

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self.experiment.log(dict(metrics), step=step)

    def log_hyperparams(self, params: dict[str, Any]) -> None:
        self.experiment.config.update(params, allow_val_change=True)

    def log_table(self, key: str, columns: list[str], rows: list[list[Any]], step: int) -> None:
        import wandb

        self.experiment.log({key: wandb.Table(columns=list(columns), data=[list(r) for r in rows])}, step=step)

    def after_save_checkpoint(self, path: Path, step: int) -> None:
        if self.log_model == "all":
            self._log_checkpoint(path, step)
        elif self.log_model:
            self._last_checkpoint = (path, step)

    def _log_checkpoint(self, path: Path, step: int) -> None:
        import wandb

        run = self.experiment
        artifact = wandb.Artifact(name=f"model-{run.id}", type="model", metadata={"step": step, "path": str(path)})
        artifact.add_dir(str(path))
        run.log_artifact(artifact, aliases=["latest", f"step-{step}"])

    def finalize(self, status: str) -> None:
        if self._run is None:
            return
        if self._last_checkpoint is not None and self._last_checkpoint[0].is_dir():
            self._log_checkpoint(*self._last_checkpoint)
        self._run.finish(exit_code=0 if status == "success" else 1)
        self._run = None
