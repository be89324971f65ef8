"""torchtitan model specs for HF checkpoints: a registry flavor, or a Qwen3 config derived from ``config.json``."""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Any

import torch
from torch import nn

from rlforge.errors import ConfigError
from rlforge.imports import require

ATTENTIONS = ("auto", "sdpa", "flex", "varlen")
"""Inner attention: ``sdpa`` (causal SDPA, flash kernels on GPU; trains on CPU), ``flex``/``varlen`` (torchtitan's
document-masked GPU kernels). ``auto`` is ``sdpa``."""

_INIT = {"weight": partial(nn.init.normal_, std=0.02)}  # overwritten by the checkpoint; needed to build


def resolve_attention(attention: str, device: torch.device) -> str:
    """``auto`` -> ``sdpa``: rlforge feeds one right-aligned sequence per row, for which causal SDPA is exact and
    needs no block mask. On CPU only ``sdpa`` trains (FlexAttention has no CPU backward, varlen no CPU kernel)."""
    if attention not in ATTENTIONS:
        raise ConfigError(f"module.backend_options.attention must be one of {ATTENTIONS}, got {attention!r}")
    if attention != "sdpa" and attention != "auto" and device.type == "cpu":
        raise ConfigError(f"module.backend_options.attention {attention!r} cannot train on CPU; use sdpa (or auto)")
    return "sdpa" if attention == "auto" else attention


def _inner_attention(attention: str) -> Any:
    from torchtitan.models.common import ScaledDotProductAttention
    from torchtitan.models.common.config_utils import get_attention_config

    # torchtitan's registry refuses "sdpa" for language models (it cannot take document masks); rlforge feeds
    # one right-aligned sequence per row, for which plain causal attention is exact.
    return ScaledDotProductAttention.Config() if attention == "sdpa" else get_attention_config(attention)


def _rope_theta(hf_config: Any) -> float:
    params = getattr(hf_config, "rope_parameters", None) or {}
    if params.get("rope_type", "default") != "default":
        raise ConfigError(f"titan backend: rope scaling {params.get('rope_type')!r} is not supported (default only)")
    return float(params.get("rope_theta", getattr(hf_config, "rope_theta", 10000.0)))


def qwen3_config_from_hf(hf_config: Any, attention: str) -> Any:
    """A torchtitan ``Qwen3Model.Config`` with the sizes of an HF ``Qwen3Config`` (dense Qwen3 only).

    Args:
        hf_config: The HF config (``model_type == "qwen3"``).
        attention: ``sdpa``, ``flex`` or ``varlen``.
    """
    from torchtitan.models.common import CosSinRoPE, Embedding, Linear
    from torchtitan.models.common.config_utils import make_ffn_config, make_gqa_config
    from torchtitan.models.common.nn_modules import RMSNorm
    from torchtitan.models.qwen3 import Qwen3Model
    from torchtitan.models.qwen3.model import Qwen3TransformerBlock

    c = hf_config
    if getattr(c, "attention_bias", False):
        raise ConfigError("titan backend: Qwen3 with attention_bias is not supported by torchtitan's adapter")

    def norm(dim: int) -> Any:
        return RMSNorm.Config(normalized_shape=dim, eps=c.rms_norm_eps, param_init={"weight": nn.init.ones_})

    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    rope = CosSinRoPE.Config(dim=head_dim, max_seq_len=c.max_position_embeddings, theta=_rope_theta(c))
    layers = [
        Qwen3TransformerBlock.Config(
            attention_norm=norm(c.hidden_size),
            ffn_norm=norm(c.hidden_size),
            attention=make_gqa_config(
                dim=c.hidden_size,
                n_heads=c.num_attention_heads,
                n_kv_heads=c.num_key_value_heads,
                head_dim=head_dim,
                wqkv_param_init=_INIT,
                wo_param_init=_INIT,
                inner_attention=_inner_attention(attention),
                fuse_qkv=True,
                rope=rope,
                qk_norm=norm(head_dim),
            ),
            feed_forward=make_ffn_config(
                dim=c.hidden_size, hidden_dim=c.intermediate_size, w1_param_init=_INIT, w2w3_param_init=_INIT
            ),
        )
        for _ in range(c.num_hidden_layers)
    ]
    return Qwen3Model.Config(
        vocab_size=c.vocab_size,
        dim=c.hidden_size,
        norm=norm(c.hidden_size),
        enable_weight_tying=bool(c.tie_word_embeddings),
        tok_embeddings=Embedding.Config(num_embeddings=c.vocab_size, embedding_dim=c.hidden_size, param_init=_INIT),
        lm_head=Linear.Config(in_features=c.hidden_size, out_features=c.vocab_size, param_init=_INIT),
        layers=layers,
    )


def titan_spec(hf_config: Any, flavor: str | None, attention: str) -> Any:
    """torchtitan ``ModelSpec`` (model config, parallelize function, state-dict adapter) for an HF checkpoint.

    Args:
        hf_config: The checkpoint's HF config; only ``qwen3`` is supported.
        flavor: A torchtitan registry flavor (``0.6B``, ``1.7B``, ``4B``, ...), checked against ``hf_config``;
            ``None`` derives the sizes from ``hf_config`` (any dense Qwen3, e.g. the tiny test models).
        attention: ``sdpa``, ``flex`` or ``varlen``.
    """
    require("titan", "module.backend='titan'")
    from torchtitan.models.qwen3 import model_registry, qwen3_configs

    if getattr(hf_config, "model_type", None) != "qwen3":
        raise ConfigError(f"titan backend supports Qwen3 checkpoints, got model_type {hf_config.model_type!r}")
    if flavor is None:
        spec = model_registry("debugmodel", attn_backend="flex")
        model = _with_sharding(qwen3_config_from_hf(hf_config, attention))
        return dataclasses.replace(spec, flavor="from-hf-config", model=model)
    if flavor not in qwen3_configs:
        raise ConfigError(f"module.titan_flavor {flavor!r} is not a torchtitan Qwen3 flavor: {sorted(qwen3_configs)}")
    spec = model_registry(flavor, attn_backend="flex" if attention == "sdpa" else attention)
    model = spec.model
    got = (model.vocab_size, model.dim, len(model.layers), model.enable_weight_tying)
    want = (
        hf_config.vocab_size,
        hf_config.hidden_size,
        hf_config.num_hidden_layers,
        bool(hf_config.tie_word_embeddings),
    )
    if got != want:
        raise ConfigError(
            f"module.titan_flavor {flavor!r} (vocab, dim, layers, tied) = {got} does not match the checkpoint's {want}"
        )
    if attention == "sdpa":
        for layer in model.layers:
            layer.attention.inner_attention = _inner_attention("sdpa")
    _with_sharding(model)
    return spec


def _with_sharding(model: Any) -> Any:
    """Fills the tensor-parallel plan into ``model``'s sub-configs (torchtitan's trainer does it in
    ``update_from_config``); without it ``parallelize`` with ``tensor_parallel_degree > 1`` shards nothing over
    the TP ranks. Axes of degree 1 are skipped at parallelize time, so FSDP-only runs are unchanged."""
    from torchtitan.models.qwen3.sharding import set_qwen3_sharding_config

    set_qwen3_sharding_config(model, enable_sp=False, enable_ep=False)
    return model
