"""The layer math of a Llama-family HF decoder (Llama, Qwen2, Qwen3, Mistral) on the model's own parameters.

Shared by ``KVDecoder`` (the sampler's prefill and decode steps, ``decoder.py``) and the packed training forward
(``rlforge/models/packed.py``): norms, RoPE, the q/k/v projections, attention, the MLP, one layer over
left-padded prompts, and the LM head. Projections go through ``generation/linear.py`` (oneDNN on x86 CPUs).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from rlforge.generation.linear import ROW_ALIGN, linear, linear_add

LayerOut = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def _rms_norm(x: torch.Tensor, norm: nn.Module) -> torch.Tensor:
    if x.dtype == torch.float32:  # one fused op, bit-identical to HF's fp32 path (measured)
        return F.rms_norm(x, (x.shape[-1],), norm.weight, norm.variance_epsilon)
    # HF normalises in fp32 and casts back before the weight multiply; same order here.
    return norm.weight * F.rms_norm(x.float(), (x.shape[-1],), None, norm.variance_epsilon).to(x.dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def _rotate_signed(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """``_rotate`` with the sign of ``rotate_half`` folded into ``signed_sin``: swapping the halves is a flip."""
    shape = x.shape
    swapped = x.unflatten(-1, (2, shape[-1] // 2)).flip(-2).reshape(shape)
    return torch.addcmul(x * cos, swapped, signed_sin)


def low_precision(x: torch.Tensor) -> bool:
    """Whether ops on ``x`` compute below fp32: a bf16/fp16 tensor, or a lower-precision autocast on its device."""
    if x.dtype not in (torch.float32, torch.float64):
        return True
    device = x.device.type
    return torch.is_autocast_enabled(device) and torch.get_autocast_dtype(device) not in (torch.float32, torch.float64)


def _linear_add(residual: torch.Tensor, x: torch.Tensor, proj: nn.Linear) -> torch.Tensor:
    """``residual + proj(x)`` for 2-D ``x`` in one GEMM when the projection has no bias.

    Under a bf16 autocast the sum stays unfused: ``addmm`` would round the fp32 residual stream to bf16.
    """
    if proj.bias is None and not low_precision(residual):
        return linear_add(residual, x, proj.weight)
    return residual + linear(x, proj.weight, proj.bias)


def lm_head(model: nn.Module, h: torch.Tensor) -> torch.Tensor:
    """``model.lm_head(h)``, through ``linear`` when the head is a plain ``nn.Linear``."""
    head = model.lm_head
    return linear(h, head.weight, head.bias) if type(head) is nn.Linear else head(h)


@dataclass(frozen=True)
class Heads:
    """Attention head layout of a Llama-family config: query heads, key/value heads, head size."""

    n: int
    n_kv: int
    dim: int

    @classmethod
    def of(cls, config) -> Heads:
        n = config.num_attention_heads
        return cls(n, config.num_key_value_heads or n, getattr(config, "head_dim", None) or config.hidden_size // n)


def stacked_qkv(attn: nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The q, k and v projections' weights (and biases, zeros for a missing one) stacked into one's (copies)."""
    projections = (attn.q_proj, attn.k_proj, attn.v_proj)
    weight = torch.cat([p.weight for p in projections])
    if all(p.bias is None for p in projections):
        return weight, None
    return weight, torch.cat([p.weight.new_zeros(p.out_features) if p.bias is None else p.bias for p in projections])


def project_qkv(
    attn: nn.Module,
    h: torch.Tensor,
    heads: Heads,
    h_query: torch.Tensor | None = None,
    stacked: tuple[torch.Tensor, torch.Tensor | None] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Queries ``[..., H, D]``, keys and values ``[..., H_kv, D]`` of the normed hidden states ``h`` ``[..., hidden]``
    (Qwen3's per-head q/k norms applied; no RoPE). Queries come from ``h_query`` instead when given; ``stacked``
    (``stacked_qkv(attn)``, current with the weights) runs the three projections as one product."""
    shape = h.shape[:-1]
    if stacked is not None and h_query is None:
        sizes = [heads.n * heads.dim, heads.n_kv * heads.dim, heads.n_kv * heads.dim]
        q, k, v = linear(h, *stacked).split(sizes, dim=-1)
        q = q.unflatten(-1, (heads.n, heads.dim))
        k, v = k.unflatten(-1, (heads.n_kv, heads.dim)), v.unflatten(-1, (heads.n_kv, heads.dim))
    else:
        h_query = h if h_query is None else h_query
        q = linear(h_query, attn.q_proj.weight, attn.q_proj.bias).view(*h_query.shape[:-1], heads.n, heads.dim)
        k = linear(h, attn.k_proj.weight, attn.k_proj.bias).view(*shape, heads.n_kv, heads.dim)
        v = linear(h, attn.v_proj.weight, attn.v_proj.bias).view(*shape, heads.n_kv, heads.dim)
    # Under a bf16 autocast the projections come out bf16: back to h's dtype, so the q/k norms, RoPE and the
    # attention layout copies (padding, key concatenation) run in fp32, as attention itself does on CPU.
    q, k, v = q.to(h.dtype), k.to(h.dtype), v.to(h.dtype)
    if getattr(attn, "q_norm", None) is not None:  # Qwen3: RMSNorm over each head before RoPE
        q, k = _rms_norm(q, attn.q_norm), _rms_norm(k, attn.k_norm)
    return q, k, v


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float) -> torch.Tensor:
    """SDPA of queries ``[B, H, T, D]`` over keys/values ``[B, H_kv, S, D]`` under the bool ``mask`` ``[B, 1, T, S]``.

    On CPU it runs in fp32 even under a bf16 autocast or with bf16 weights: there CPU SDPA's bf16 backward took
    over half of a bf16-mixed training forward + backward, and the bf16 gradients it hands back made inductor's
    fused layout kernels ~5x slower (``benchmarks/bench_precision.py``); attention is a few % of the layer's FLOPs.
    On GPU the flash kernels want bf16, and get it.
    """
    if q.device.type != "cpu" or not low_precision(q):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=True)
    with torch.autocast("cpu", enabled=False):
        out = F.scaled_dot_product_attention(
            q.float(), k.float(), v.float(), attn_mask=mask, scale=scale, enable_gqa=True
        )
    return out.to(q.dtype)


def mlp_residual(layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``x + mlp(post_attention_layernorm(x))`` of one decoder layer."""
    mlp = layer.mlp
    h = _rms_norm(x, layer.post_attention_layernorm)
    gate, up, down = mlp.gate_proj, mlp.up_proj, mlp.down_proj
    h = mlp.act_fn(linear(h, gate.weight, gate.bias)) * linear(h, up.weight, up.bias)
    return _linear_add(x, h, down) if x.dim() == 2 else x + linear(h, down.weight, down.bias)


def prompt_layer(
    layer: nn.Module,
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    mask: torch.Tensor,
    heads: Heads,
    aligned: bool = False,
) -> LayerOut:
    """One decoder layer over left-padded prompts ``x`` ``[P, W, hidden]`` (differentiable).

    ``aligned``: ``P x W`` is a multiple of ``linear.ROW_ALIGN``, asserted so that a compiled graph's symbolic sizes
    prove it and its projections run through oneDNN (``generation/linear.py``).

    Returns:
        The layer's output ``[P, W, hidden]`` and its RoPE'd keys and values ``[P, H_kv, W, D]``.
    """
    attn = layer.self_attn
    b, t, _ = x.shape
    if aligned:
        torch._check(b * t % ROW_ALIGN == 0)
    q, k, v = project_qkv(attn, _rms_norm(x, layer.input_layernorm), heads)
    q, k, v = _rotate(q.transpose(1, 2), cos, sin), _rotate(k.transpose(1, 2), cos, sin), v.transpose(1, 2)
    out = attention(q, k, v, mask, attn.scaling)
    # 2-D rows from here: the residual adds fuse into the GEMMs (addmm), and a compiled graph with symbolic
    # P and W needs no re-layout copy of the [P, W, ...] views (measured: the MLP kernel 3x slower with it).
    x = _linear_add(x.reshape(b * t, -1), out.transpose(1, 2).reshape(b * t, -1), attn.o_proj)
    return mlp_residual(layer, x).view(b, t, -1), k, v


def last_prompt_layer(
    layer: nn.Module, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor, heads: Heads
) -> LayerOut:
    """``prompt_layer`` for the model's last layer, whose output only feeds the next-token logits: keys and values
    of every position, the rest of the layer (~90% of its FLOPs) at each prompt's last position only.

    Returns:
        The layer's output at the last position ``[P, 1, hidden]`` and its keys and values ``[P, H_kv, W, D]``.
    """
    attn = layer.self_attn
    h = _rms_norm(x, layer.input_layernorm)
    q, k, v = project_qkv(attn, h, heads, h_query=h[:, -1:])
    last_cos, last_sin = cos[:, :, -1:], sin[:, :, -1:]
    q, k, v = _rotate(q.transpose(1, 2), last_cos, last_sin), _rotate(k.transpose(1, 2), cos, sin), v.transpose(1, 2)
    out = attention(q, k, v, mask[:, :, -1:], attn.scaling)
    x = _linear_add(x[:, -1], out.flatten(1), attn.o_proj)  # out: [P, H, 1, D]
    return mlp_residual(layer, x)[:, None], k, v


def prompt_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """``[P, 1, W, W]`` bool mask of left-padded prompts: causal over tokens; a padding query sees itself (finite)."""
    width, device = attention_mask.shape[1], attention_mask.device
    query, key = torch.arange(width, device=device)[:, None], torch.arange(width, device=device)[None]
    return (attention_mask.bool()[:, None, None, :] & (key <= query)) | (key == query)


def rope_table(model: nn.Module, total: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos, sin`` ``[total, D]`` of positions ``0..total-1`` from the model's own rotary module, in its dtype."""
    param = next(model.parameters())
    head_dim = Heads.of(model.config).dim
    cos, sin = model.model.rotary_emb(param.new_zeros(1, total, head_dim), torch.arange(total, device=device)[None])
    return cos[0].to(param.dtype), sin[0].to(param.dtype)
