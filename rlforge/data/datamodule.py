"""``RLDataModule``: prompts for rollouts and held-out prompts for validation, with resumable order."""

from __future__ import annotations

from typing import Any

from rlforge.data.base import PromptDataModule
from rlforge.data.prompts import DEFAULT_FIELDS, prompt_row


class RLDataModule(PromptDataModule):
    """Supplies prompt batches for training and the held-out split for validation.

    The prompts come from a dataset (``dataset``: a hub id such as ``openai/gsm8k`` or a local file;
    ``train_file``/``val_file``: local files) or, when neither ``dataset`` nor ``train_file`` is set,
    from a built-in synthetic ``task``. Held-out rows come from ``val_file``, else a seeded
    ``val_fraction`` of the training rows, else the hub split ``val_split``. The training order is a
    seeded shuffle per epoch and its position is saved in checkpoints, so a resumed run sees the same
    prompts as an uninterrupted one.

    Args:
        task: Built-in task name (``addition``, ``reverse``, ``max``; with a ``module.environment``:
            ``tool_multiply``, ``guess_number``); ignored when ``dataset`` or ``train_file`` is set (set it to
            ``null`` to make that explicit).
        train_file: Local ``.json``/``.jsonl``/``.parquet`` file of training prompts (like ``dataset``).
        val_file: File of held-out prompts, read like the training data.
        prompt_field: Column holding the prompt text; ``null``: ``prompt`` (plain), ``question`` (gsm8k),
            ``problem`` (math).
        target_field: Column holding the answer or worked solution; ``null``: ``target`` (plain),
            ``answer`` (gsm8k), ``solution`` (math).
        batch_size: Prompts per RL step (each sampled ``group_size`` times).
        val_size: Use only the first ``val_size`` held-out rows (``None``: all).
        seed: Seed of the task generator, of the shuffling and of the ``val_fraction`` split.
        dataset: Hub dataset id (``openai/gsm8k``, ``EleutherAI/hendrycks_math``; needs network or the
            HF cache) or a local ``.json``/``.jsonl``/``.parquet`` file. Takes precedence over ``task``;
            exclusive with ``train_file``.
        dataset_config: Hub dataset configuration name (``main`` for ``openai/gsm8k``, ``algebra``, ...).
        train_split: Hub split of the training prompts.
        val_split: Hub split of the held-out prompts (``null``: none); not used for a local file, nor
            when ``val_fraction`` or ``val_file`` is set.
        target_format: How the target is taken from ``target_field``: ``plain`` (as is), ``gsm8k`` (the
            number after the last ``####``, commas removed) or ``math`` (the last ``\\boxed{...}``).
        val_fraction: Hold out this fraction of the training rows (seeded by ``seed``) for validation;
            0 disables. Takes precedence over ``val_split``.
        max_train_rows: Use at most this many training rows (``None``: all).
        streaming: Stream the hub dataset instead of downloading it whole (with ``max_train_rows``/``val_size``
            only those rows are read).
        max_prompt_tokens: Longest prompt in tokens (as encoded for generation); ``null``: only the model's
            bound, ``max_position_embeddings`` minus ``max_new_tokens``, which always applies too.
        overlong_prompts: What a longer prompt does: ``error`` (one line naming file and row, before the
            first rollout) or ``skip`` (the row is dropped; counted in ``data/skipped_prompts``).
    """

    def __init__(
        self,
        task: str | None = "addition",
        train_file: str | None = None,
        val_file: str | None = None,
        prompt_field: str | None = None,
        target_field: str | None = None,
        batch_size: int = 16,
        val_size: int | None = None,
        seed: int = 0,
        dataset: str | None = None,
        dataset_config: str | None = None,
        train_split: str = "train",
        val_split: str | None = "test",
        target_format: str = "plain",
        val_fraction: float = 0.0,
        max_train_rows: int | None = None,
        streaming: bool = False,
        max_prompt_tokens: int | None = None,
        overlong_prompts: str = "error",
    ) -> None:
        super().__init__(
            task=task,
            train_file=train_file,
            val_file=val_file,
            batch_size=batch_size,
            val_size=val_size,
            seed=seed,
            dataset=dataset,
            dataset_config=dataset_config,
            train_split=train_split,
            val_split=val_split,
            target_format=target_format,
            val_fraction=val_fraction,
            max_train_rows=max_train_rows,
            streaming=streaming,
            max_prompt_tokens=max_prompt_tokens,
            overlong_prompts=overlong_prompts,
        )
        default_prompt, default_target = DEFAULT_FIELDS[target_format]
        self.prompt_field, self.target_field = prompt_field or default_prompt, target_field or default_target

    @property
    def prompt_column(self) -> str:
        return self.prompt_field

    def make_row(self, record: dict[str, Any], source: str, index: int) -> dict[str, str]:
        return prompt_row(record, source, index, self.prompt_field, self.target_field, self.target_format)
