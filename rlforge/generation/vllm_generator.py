"""``VLLMGenerator``: the ``Generator`` protocol on top of vLLM's public ``LLM`` API."""

from __future__ import annotations

import random
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from rlforge.errors import ConfigError
from rlforge.generation.params import SamplingParams
from rlforge.generation.torch_generator import eos_token_ids
from rlforge.imports import require
from rlforge.types import Completion

_WEIGHT_TRANSFERS = ("disk", "direct")


class VLLMGenerator:
    """Samples with a vLLM engine and returns the same ``Completion``s as ``TorchGenerator``.

    The engine runs with ``logprobs_mode="processed_logprobs"``, so each returned logprob is that of the
    sampled token under ``softmax(logits / temperature)`` (greedy: ``softmax(logits)``), exactly what
    ``TorchGenerator`` returns and the trainer recomputes. With ``top_k``/``top_p`` active, vLLM's processed
    logprobs are those of the truncated, renormalised distribution it really sampled from, whereas
    ``TorchGenerator`` reports the pre-filter ones.

    Weight updates go through ``LLM.collective_rpc("reload_weights", ...)`` (from a safetensors file,
    or the tensors themselves with ``weight_transfer="direct"``), then the prefix cache is reset, since
    cached KV blocks were computed by the old weights. With ``sleep_between_rollouts`` the engine sleeps
    (level 1: weights to host memory, KV cache dropped) after each ``generate`` so a colocated trainer gets
    the accelerator memory back, and wakes up at the next ``generate`` or ``update_weights``.

    Args:
        model: An HF model folder (or hub id) vLLM loads; its architecture must be one vLLM supports.
        tokenizer: Tokenizer used to decode responses (defaults to the folder's tokenizer).
        seed: Seed of the per-call request seeds (reproducible sampling).
        policy_version: Version of the weights in ``model``.
        dtype: Engine dtype (``auto``, ``float32``, ``bfloat16``, ``float16``).
        gpu_memory_utilization: Fraction of accelerator memory vLLM may take (weights + KV cache).
        max_model_len: Longest prompt + response (defaults to the model config's).
        enforce_eager: Skip CUDA graphs / torch.compile (faster start, slower decode).
        sleep_between_rollouts: Sleep after each ``generate`` (colocated with the trainer on one GPU).
        weight_transfer: ``disk`` (write safetensors, reload from the folder; works with every executor) or
            ``direct`` (pass the tensors in the RPC; fastest with an in-process engine).
        weights_dir: Folder for ``disk`` weight updates (default: a temporary folder).
        engine_kwargs: Extra ``vllm.LLM`` keyword arguments (e.g. ``tensor_parallel_size``).
    """

    def __init__(
        self,
        model: str,
        tokenizer: Any = None,
        seed: int = 0,
        policy_version: int = 0,
        dtype: str = "auto",
        gpu_memory_utilization: float = 0.4,
        max_model_len: int | None = None,
        enforce_eager: bool = False,
        sleep_between_rollouts: bool = False,
        weight_transfer: str = "disk",
        weights_dir: str | None = None,
        engine_kwargs: dict[str, Any] | None = None,
    ) -> None:
        require("vllm", "VLLMGenerator")
        if weight_transfer not in _WEIGHT_TRANSFERS:
            raise ConfigError(f"generator weight_transfer must be one of {_WEIGHT_TRANSFERS}, got {weight_transfer!r}")
        from vllm import LLM

        kwargs = dict(engine_kwargs or {})
        if sleep_between_rollouts:
            from vllm.platforms import current_platform

            if not current_platform.is_sleep_mode_available():
                raise ConfigError(
                    "generator sleep_between_rollouts: vLLM has no sleep mode on this platform (CUDA only); "
                    "set it false"
                )
            kwargs.setdefault("enable_sleep_mode", True)
        self.llm = LLM(
            model=model,
            dtype=dtype,
            seed=seed,
            logprobs_mode="processed_logprobs",
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            enforce_eager=enforce_eager,
            **kwargs,
        )
        self.tokenizer = tokenizer if tokenizer is not None else self.llm.get_tokenizer()
        self.eos_token_ids = eos_token_ids(self.tokenizer)
        self.policy_version = policy_version
        self.sleep_between_rollouts = sleep_between_rollouts
        self.weight_transfer = weight_transfer
        self._tmp = None if weights_dir else tempfile.TemporaryDirectory(prefix="rlforge-vllm-weights-")
        self.weights_dir = Path(weights_dir or self._tmp.name)
        self._model_path = model
        self._rng = random.Random(seed)
        # vLLM's CPU backend prepacks lm_head's GEMM weight at load; with tied embeddings reload_weights skips
        # lm_head (it is the embedding), so its packed copy would keep the old weights.
        from vllm.platforms import current_platform

        tied = bool(getattr(self.llm.model_config.hf_config, "tie_word_embeddings", False))
        self._repack_tied_lm_head = tied and current_platform.is_cpu()
        self._asleep = False

    @classmethod
    def from_policy(cls, policy: torch.nn.Module, tokenizer: Any, **kwargs: Any) -> VLLMGenerator:
        """Saves ``policy`` (an HF model, or anything with ``save_pretrained``) and starts an engine on it.

        Args:
            policy: The trainable policy; its current weights become version ``policy_version``.
            tokenizer: Its tokenizer (saved next to the weights for vLLM).
            **kwargs: ``VLLMGenerator`` arguments.
        """
        folder = tempfile.TemporaryDirectory(prefix="rlforge-vllm-model-")
        # Every rank's engine reads its own folder, but with torch.distributed running transformers' and titan's
        # save_pretrained write on rank 0 alone: write the HF folder here (titan: on this rank, explicitly).
        if callable(getattr(policy, "to_hf_model", None)):
            policy.save_pretrained(folder.name, safe_serialization=True, is_main_process=True)
        else:
            _write_hf_folder(policy, Path(folder.name))
        tokenizer.save_pretrained(folder.name)
        generator = cls(folder.name, tokenizer=tokenizer, **kwargs)
        generator._model_tmp = folder  # removed with the generator
        return generator

    def close(self) -> None:
        """Shuts the engine down now (idempotent): its exit hook would otherwise tear down vLLM's process groups
        after the trainer has left the run's own ``torch.distributed`` group."""
        self.llm.llm_engine.engine_core.shutdown()

    # ------------------------------------------------------------------------------------- weights
    def update_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        """Reloads the engine's weights from ``state_dict`` (HF names) and records ``version``."""
        self._wake()
        tensors = _unshared({k: v.detach().to("cpu").contiguous() for k, v in state_dict.items()})
        if self.weight_transfer == "direct":
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": list(tensors.items())})
        else:
            self.weights_dir.mkdir(parents=True, exist_ok=True)
            save_file(tensors, str(self.weights_dir / "model.safetensors"))
            self.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(self.weights_dir)})
            self._model_path = str(self.weights_dir)
        if self._repack_tied_lm_head:
            self.llm.apply_model(_repack_lm_head)
        # Cached prefix KV blocks were computed with the old weights.
        self.llm.reset_prefix_cache()
        self.policy_version = version

    def weights_state_dict(self) -> dict[str, torch.Tensor]:
        """The engine's current weights in HF names, read back from the last weights file (for resume)."""
        folder = Path(self._model_path)
        files = sorted(folder.glob("*.safetensors")) if folder.is_dir() else []
        if not files:
            raise ConfigError(f"VLLMGenerator: no safetensors weights under {folder} to save the generator state")
        weights: dict[str, torch.Tensor] = {}
        for file in files:
            weights.update(load_file(str(file)))
        return weights

    def state_dict(self) -> dict[str, Any]:
        return {"rng": self._rng.getstate(), "policy_version": self.policy_version}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._rng.setstate(state["rng"])
        self.policy_version = int(state["policy_version"])

    # ---------------------------------------------------------------------------------- sampling
    def _sampling_params(self, params: SamplingParams, seed: int | None = None) -> Any:
        from vllm import SamplingParams as VSamplingParams

        return VSamplingParams(
            n=params.n,
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=params.top_k,
            max_tokens=params.max_new_tokens,
            stop_token_ids=sorted(set(self.eos_token_ids) | set(params.stop_token_ids)),
            logprobs=0,  # only the sampled token's logprob
            seed=self._rng.randrange(2**31) if seed is None else seed,  # children of an n > 1 request get seed + index
            detokenize=False,  # decoded below with the policy tokenizer, like TorchGenerator
        )

    def generate(self, prompt_ids: list[list[int]], params: SamplingParams) -> list[list[Completion]]:
        """Samples ``params.n`` completions per prompt; one list per prompt, in prompt order."""
        from vllm.inputs import TokensPrompt

        if not prompt_ids:
            return []
        if any(len(p) == 0 for p in prompt_ids):
            raise ValueError("generate: every prompt must have at least one token")
        self._wake()
        if params.seed is None:
            sampling = self._sampling_params(params)
        else:  # prompt i draws from seed + i alone: the same samples however the prompts are batched
            sampling = [self._sampling_params(params, (params.seed + i) % 2**31) for i in range(len(prompt_ids))]
        outputs = self.llm.generate(
            [TokensPrompt(prompt_token_ids=list(p)) for p in prompt_ids], sampling, use_tqdm=False
        )
        if self.sleep_between_rollouts:
            self.llm.sleep(level=1)
            self._asleep = True
        result: list[list[Completion]] = []
        for prompt, request in zip(prompt_ids, outputs, strict=True):
            group = []
            for sample in sorted(request.outputs, key=lambda s: s.index):
                token_ids = list(sample.token_ids)
                logprobs = [float(step[tok].logprob) for tok, step in zip(token_ids, sample.logprobs, strict=True)]
                group.append(
                    Completion(
                        text=self.tokenizer.decode(token_ids, skip_special_tokens=True),
                        token_ids=token_ids,
                        logprobs=logprobs,
                        prompt_ids=list(prompt),
                        stop_reason="length" if sample.finish_reason == "length" else "stop",
                        policy_version=self.policy_version,
                        metadata={"sampler": "vllm"},
                    )
                )
            result.append(group)
        return result

    def _wake(self) -> None:
        if self._asleep:
            self.llm.wake_up()
            self._asleep = False


def _write_hf_folder(model: torch.nn.Module, folder: Path) -> None:
    """``config.json``, ``generation_config.json`` and ``model.safetensors`` of an HF model, on any rank."""
    from safetensors.torch import save_file

    model.config.save_pretrained(folder)
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.save_pretrained(folder)
    weights = {k: v.detach().to("cpu").contiguous() for k, v in _unshared(model.state_dict()).items()}
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})


def _unshared(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Keeps one name per storage: tied weights (``lm_head`` = embeddings) are stored once, as HF saves them."""
    seen: set[int] = set()
    out = {}
    for name, tensor in tensors.items():
        if tensor.data_ptr() not in seen:
            seen.add(tensor.data_ptr())
            out[name] = tensor
    return out


def _repack_lm_head(model: torch.nn.Module) -> None:
    """Runs inside the vLLM worker: re-derives lm_head's CPU GEMM weight from the (tied, reloaded) embedding."""
    model.lm_head.quant_method.process_weights_after_loading(model.lm_head)
