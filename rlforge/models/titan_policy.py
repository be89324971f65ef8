"""``TitanPolicy``: a torchtitan model behind the HF causal-LM surface the rest of rlforge uses.

rlforge speaks HF everywhere outside the training step (generators, checkpoints, the reference model), so
the titan backend keeps torchtitan's own module for forward/backward and the optimizer, and converts at the
edges with torchtitan's state-dict adapter: ``state_dict()``/``load_state_dict()`` use HF names,
``save_pretrained`` writes an HF folder, ``to_hf_model()`` builds the HF twin the samplers run.
"""

from __future__ import annotations

import json
from collections import namedtuple
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rlforge.errors import ConfigError
from rlforge.models.titan_spec import resolve_attention, titan_spec

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_LM_HEAD, _EMBED = "lm_head.weight", "model.embed_tokens.weight"
IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


class TitanPolicy(nn.Module):
    """A torchtitan Qwen3 with HF-named weights.

    Build it with ``TitanPolicy.from_pretrained``. ``forward`` accepts the batches ``compute_logprobs`` makes
    (``[left-padded prompt | right-padded response]``): each row is shifted so its tokens start at position
    0, which makes plain causal attention exact without a padding mask, and the logits are shifted back.

    Args:
        spec: torchtitan ``ModelSpec`` (see ``rlforge.models.titan_spec.titan_spec``).
        hf_config: The checkpoint's HF config (kept for ``save_pretrained``/``to_hf_model``).
        generation_config: The checkpoint's HF generation config, if any (EOS ids).
    """

    def __init__(self, spec: Any, hf_config: Any, generation_config: Any = None) -> None:
        super().__init__()
        self.spec, self.config, self.generation_config = spec, hf_config, generation_config
        with torch.device("meta"):
            self.model = spec.model.build()
        self.adapter = spec.state_dict_adapter(spec.model, None)
        self._hf_keys = frozenset(self._to_hf(self.model.state_dict()))  # on meta tensors: names only
        # e.g. "ScaledDotProductAttention", "FlexAttention" (the config class is nested in its module class)
        self.attention = type(spec.model.layers[0].attention.inner_attention).__qualname__.split(".")[0]
        self.parallel_dims: Any = None
        self._parallel_args: dict[str, Any] | None = None  # how `parallelize` was called (copies repeat it)

    # ------------------------------------------------------------------------------------ building
    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str,
        dtype: str = "float32",
        device: str | torch.device = "cpu",
        flavor: str | None = None,
        attention: str = "auto",
        parallelize: bool | None = None,
        tensor_parallel_degree: int = 1,
    ) -> TitanPolicy:
        """Builds the torchtitan model of an HF checkpoint and loads its weights through the adapter.

        Args:
            name_or_path: Local HF folder or hub id (loaded with transformers, then converted).
            dtype: Parameter dtype (``float32``, ``bfloat16``, ``float16``).
            device: Where the parameters live.
            flavor: torchtitan registry flavor (``1.7B``, ...) or ``None`` to size it from ``config.json``.
            attention: ``auto`` (= ``sdpa``), ``sdpa``, ``flex`` or ``varlen`` (GPU only).
            parallelize: Apply torchtitan's parallelize function (FSDP2, plus TP when
                ``tensor_parallel_degree > 1``); default: when ``torch.distributed`` runs with world size > 1.
            tensor_parallel_degree: TP degree used by the parallelize function.
        """
        from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

        if dtype not in _DTYPES:
            raise ConfigError(f"model dtype must be one of {sorted(_DTYPES)}, got {dtype!r}")
        device = torch.device(device)
        hf_config = AutoConfig.from_pretrained(name_or_path)
        try:
            generation_config = GenerationConfig.from_pretrained(name_or_path)
        except OSError:
            generation_config = None
        spec = titan_spec(hf_config, flavor, resolve_attention(attention, device))
        policy = cls(spec, hf_config, generation_config)
        policy._materialize(device, _DTYPES[dtype])
        hf_model = AutoModelForCausalLM.from_pretrained(name_or_path, dtype=_DTYPES[dtype])
        policy.load_state_dict(hf_model.state_dict())
        del hf_model
        if parallelize is None:
            parallelize = torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1
        if parallelize:
            # fully_shard shards the loaded parameters in place (each rank loaded the full checkpoint).
            policy.parallelize(tensor_parallel_degree, device, dtype)
        return policy

    def _materialize(self, device: torch.device, dtype: torch.dtype) -> None:
        """Allocates the meta-built model on ``device`` in ``dtype``; the parameters are loaded afterwards."""
        self.model.to_empty(device=device)
        self.model.to(dtype)
        with torch.no_grad():
            # Recomputes the RoPE caches (buffers) on `device` in fp32.
            self.model.init_states(buffer_device=device)

    def __deepcopy__(self, memo: dict[int, Any]) -> TitanPolicy:
        """An independent policy with the same weights (the reference model's copy).

        FSDP2 modules refuse ``copy.deepcopy``, so the copy is rebuilt from the spec, loaded with the full
        weights and, for a parallelized policy, parallelized the same way (a collective: every rank copies).
        """
        weight = next(self.model.parameters())
        device = weight.to_local().device if hasattr(weight, "to_local") else weight.device
        twin = type(self)(self.spec, self.config, self.generation_config)
        twin._materialize(device, weight.dtype)
        twin.load_state_dict(self.state_dict())
        if self._parallel_args is not None:
            twin.parallelize(**self._parallel_args)
        flags = {name: p.requires_grad for name, p in self.named_parameters()}
        for name, param in twin.named_parameters():
            param.requires_grad_(flags[name])
        memo[id(self)] = twin
        return twin.train(self.training)

    def parallelize(
        self,
        tensor_parallel_degree: int = 1,
        device: torch.device | None = None,
        dtype: str = "float32",
        spmd_backend: str = "partial_dtensor",
    ) -> TitanPolicy:
        """Applies torchtitan's parallelize function (FSDP2 over all ranks / TP) to the unmaterialised model.

        Needs an initialised process group. On CPU (gloo) torchtitan 0.3 would still build a CUDA mesh, since
        it picks the mesh device type at import, so the mesh device type is set to ``cpu`` first.

        Args:
            tensor_parallel_degree: TP degree (the rest of the world is the FSDP degree).
            device: Device the parameters will live on.
            dtype: FSDP mixed-precision parameter dtype.
            spmd_backend: torchtitan ``parallelism.spmd_backend``.
        """
        import torchtitan.distributed.parallel_dims as titan_parallel_dims
        from torchtitan.config import CompileConfig, ParallelismConfig, TrainingConfig
        from torchtitan.distributed import ParallelDims

        if not torch.distributed.is_initialized():
            raise ConfigError("titan parallelize needs torch.distributed initialised (launch with torchrun)")
        if device is not None and device.type == "cpu":
            titan_parallel_dims.device_type = "cpu"
        # torchtitan's default spmd_backend ("spmd_types") fails under torch 2.13 with 2+ ranks in fully_shard
        # ("When dp_mesh_dims is provided, all parameters must be DTensors on the full SPMD mesh"); the
        # "partial_dtensor" backend (DTensor for model-parallel axes only) is plain FSDP2 and works.
        parallelism = ParallelismConfig(tensor_parallel_degree=tensor_parallel_degree, spmd_backend=spmd_backend)
        self.parallel_dims = ParallelDims.from_config(parallelism, torch.distributed.get_world_size())
        self._parallel_args = {
            "tensor_parallel_degree": tensor_parallel_degree, "device": device, "dtype": dtype,
            "spmd_backend": spmd_backend,
        }  # fmt: skip
        training = TrainingConfig(mixed_precision_param=dtype, mixed_precision_reduce="float32")
        self.model = self.spec.parallelize_fn(
            self.model,
            parallel_dims=self.parallel_dims,
            training=training,
            parallelism=parallelism,
            compile_config=CompileConfig(enable=False),
            ac_config=None,
            dump_folder=".",
        )
        # torchtitan turns FSDP's gradient division off (its trainer normalises by the global token count);
        # rlforge losses are per-rank means, so divide the summed gradients by the data-parallel degree again.
        # Gloo has neither AVG nor PREMUL_SUM reductions: force SUM and divide afterwards there.
        from torch.distributed.fsdp import FSDPModule

        dp_degree = torch.distributed.get_world_size() // tensor_parallel_degree
        for module in self.model.modules():
            if isinstance(module, FSDPModule):
                module.set_gradient_divide_factor(float(dp_degree))
                if device is not None and device.type == "cpu":
                    module.set_force_sum_reduction_for_comms(True)
        return self

    # ------------------------------------------------------------------------------------ forward
    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        use_cache: bool = False,
        logits_to_keep: int = 0,
        **kwargs: Any,
    ) -> Any:
        """HF-style forward returning an object with ``.logits`` (``[B, L, V]``). No KV cache."""
        from transformers.modeling_outputs import CausalLMOutput

        if use_cache:
            raise ConfigError("TitanPolicy has no KV cache: sample with its HF twin (`to_hf_model()`)")
        batch, width = input_ids.shape
        start = None
        if attention_mask is not None and not bool(attention_mask.all()):
            mask = attention_mask.bool()
            start = mask.int().argmax(-1)
            length = mask.sum(-1)
            cols = torch.arange(width, device=input_ids.device)
            span = (cols[None] >= start[:, None]) & (cols[None] < (start + length)[:, None])
            if not torch.equal(span, mask):
                raise ValueError("TitanPolicy.forward: each row's attention_mask must be one contiguous block of 1s")
            input_ids = input_ids.gather(1, (cols[None] + start[:, None]) % width)
        positions = torch.arange(width, device=input_ids.device).expand(batch, width)
        masks = None if self.attention == "ScaledDotProductAttention" else self.model.get_attention_masks(positions)
        logits = self.model(input_ids, positions=positions if masks is not None else None, attention_masks=masks)
        if hasattr(logits, "full_tensor"):  # tensor parallel: lm_head's output is sharded over the vocabulary
            logits = logits.full_tensor()
        if start is not None:
            back = (torch.arange(width, device=logits.device)[None] - start[:, None]) % width
            logits = logits.gather(1, back[..., None].expand(-1, -1, logits.shape[-1]))
        if logits_to_keep:
            logits = logits[:, -logits_to_keep:]
        return CausalLMOutput(logits=logits)

    # ------------------------------------------------------------------------------- HF-named weights
    def _to_hf(self, titan: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        hf = self.adapter.to_hf(titan)
        if self.config.tie_word_embeddings and _LM_HEAD not in hf:
            hf[_LM_HEAD] = hf[_EMBED]  # HF tied models list both names
        return hf

    def state_dict(self, *args: Any, destination: Any = None, prefix: str = "", keep_vars: bool = False) -> Any:
        """The full weights in HF names (what generators, checkpoints and the reference model exchange)."""
        from torch.distributed.tensor import DTensor

        # Sharded (FSDP2/TP) parameters are DTensors: gather each one. The fused-QKV save hook already splits
        # wqkv into HF's q/k/v layout, so the adapter only renames.
        titan = {k: v.full_tensor() if isinstance(v, DTensor) else v for k, v in self.model.state_dict().items()}
        hf = {k: v if keep_vars else v.detach() for k, v in self._to_hf(titan).items()}
        if destination is None:
            return hf
        destination.update({prefix + k: v for k, v in hf.items()})
        return destination

    def load_state_dict(self, state_dict: dict[str, torch.Tensor], strict: bool = True, assign: bool = False) -> Any:
        """Loads HF-named weights; returns the missing/unexpected keys in HF names."""
        expected = set(self._hf_keys)
        given = dict(state_dict)
        if self.config.tie_word_embeddings:
            expected.discard(_LM_HEAD)
            given.pop(_LM_HEAD, None)  # tied: the adapter re-ties lm_head to the embedding
        missing, unexpected = sorted(expected - set(given)), sorted(set(given) - expected)
        if strict and (missing or unexpected):
            raise RuntimeError(f"TitanPolicy.load_state_dict: missing {missing[:5]}, unexpected {unexpected[:5]}")
        titan = self.adapter.from_hf({k: v for k, v in given.items() if k in expected})
        if self.parallel_dims is None:
            self.model.load_state_dict(titan, strict=strict)
        else:
            self._load_sharded(titan)
        return IncompatibleKeys(missing, unexpected)

    @torch.no_grad()
    def _load_sharded(self, titan: dict[str, torch.Tensor]) -> None:
        """Copies full titan-named tensors into the sharded parameters (each rank holds the full tensors)."""
        from torch.distributed.tensor import DTensor, distribute_tensor
        from torchtitan.models.common import FusedQKVLinear

        for name, module in self.model.named_modules():
            if isinstance(module, FusedQKVLinear):
                # The fused module's own load hook: merges HF-layout wq/wk/wv into its wqkv (plain tensors here).
                FusedQKVLinear._merge_qkv_on_load(module, titan, f"{name}.")
        for name, param in self.model.named_parameters():
            full = titan[name].to(param.dtype)
            if isinstance(param, DTensor):
                shard = distribute_tensor(full.to(param.device), param.device_mesh, param.placements)
                param.to_local().copy_(shard.to_local())
            else:
                param.copy_(full)

    def save_pretrained(
        self, path: str | Path, safe_serialization: bool = True, is_main_process: bool | None = None, **kwargs: Any
    ) -> None:
        """Writes an HF folder (``config.json`` + ``model.safetensors``) that ``from_pretrained`` loads.

        A collective when parallelized (every rank gathers); ``is_main_process`` (HF's argument) says whether this
        rank writes: by default rank 0 alone (one checkpoint), ``True`` for a folder of each rank's own (an engine).
        """
        from safetensors.torch import save_file

        weights = self.state_dict()
        if is_main_process is None:
            is_main_process = not torch.distributed.is_initialized() or torch.distributed.get_rank() == 0
        if not is_main_process:
            return
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        if self.config.tie_word_embeddings:
            weights.pop(_LM_HEAD, None)  # stored once, like HF
        save_file({k: v.to("cpu").contiguous() for k, v in weights.items()}, str(path / "model.safetensors"))
        self.config.save_pretrained(path)
        if self.generation_config is not None:
            self.generation_config.save_pretrained(path)
        (path / "rlforge_backend.json").write_text(json.dumps({"backend": "titan", "flavor": self.spec.flavor}))

    def to_hf_model(self) -> nn.Module:
        """An HF ``AutoModelForCausalLM`` twin with the current weights, on the same device and dtype."""
        from transformers import AutoModelForCausalLM

        weight = next(self.model.parameters())
        model = AutoModelForCausalLM.from_config(self.config, dtype=weight.dtype)
        if self.generation_config is not None:
            model.generation_config = self.generation_config
        model.load_state_dict(self.state_dict())
        return model.to(weight.device if self.parallel_dims is None else "cpu").eval()
