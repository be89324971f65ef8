"""A lean inference forward for Llama-family HF models (Llama, Qwen2, Qwen3, Mistral) over a static KV cache.

The HF forward spends most of a decode step in Python (mask building, cache objects, wrappers) on small
models, and its ``DynamicCache`` re-copies the whole cache every token. ``KVDecoder`` runs the same math
directly on the model's own parameters (no copies, so in-place weight updates are seen at once):
preallocated key/value buffers (keys transposed, ``[B, H_kv, D, L]``, so a step's scores are a plain product over
contiguous columns; values ``[B, H_kv, L, D]``), a rotary table computed once by the model's own rotary module,
and the prompt encoded once per group and broadcast to the group's rows.

A decode step (``step``) has static shapes when ``span`` is fixed: the new key/value go to the cache column
given as a tensor (``index_copy_``), and attention reads ``span`` columns under an additive mask, so the same
step compiles into one graph and can be replayed by CUDA graphs. On CPU with an fp32 cache the step's attention
runs rlforge's native kernels (``cpu_kernels.py``: 1.5-3x ``torch.bmm``'s read rate); ``torch.bmm`` elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from rlforge.generation.cpu_kernels import load_decode_attention
from rlforge.generation.linear import ROW_ALIGN, linear, linear_add, onednn_active

_FAMILY = {"llama", "qwen2", "qwen3", "mistral"}
_STATIC_ROPE = {"default", "linear", "llama3", "yarn"}  # rope types whose tables do not depend on the length
LayerOut = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
CACHE_BUCKET = 64  # cache lengths round up to a multiple of this, so compiled steps see few distinct shapes


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


def decode_attention(
    q: torch.Tensor, keys_t: torch.Tensor, values: torch.Tensor, bias: torch.Tensor, scale: float, native: bool
) -> torch.Tensor:
    """One decode step's attention for each (row, KV head): ``softmax(scale * q @ keys_t + bias) @ values``.

    Args:
        q: The query heads of each KV head, ``[N, G, D]``.
        keys_t: Keys, transposed, ``[N, D, S]``.
        values: ``[N, S, D]``.
        bias: Additive mask ``[N, 1, S]`` (0 or ``-inf``).
        scale: The softmax scale.
        native: Use ``torch.ops.rlforge`` (``cpu_kernels.load_decode_attention()`` must have returned ``True``).

    Returns:
        ``[N, G, D]``.
    """
    if native:
        scores = torch.ops.rlforge.decode_scores(q, keys_t, scale)
        return torch.ops.rlforge.decode_mix((scores + bias).softmax(-1), values)
    # The query heads of a KV group share one batched matmul (no K/V repeat); scale and mask fused.
    return torch.bmm(torch.baddbmm(bias, q, keys_t, alpha=scale).softmax(-1), values)


class KVDecoder:
    """Prefill + one-token decode steps for a Llama-family causal LM (see module docstring).

    Use ``KVDecoder.supports(model, total_len)`` first; other architectures use the HF forward.

    Args:
        model: An HF ``*ForCausalLM`` of a supported family (``model.model.layers``, ``model.lm_head``).
        layer_fn: Runs one layer of the prefill (all but the last, see ``last_prompt_layer``); ``prompt_layer`` or
            a compiled wrapper of it.
        native_attention: Decode attention through rlforge's CPU kernels; honoured only where they apply (a CPU
            model with fp32 weights) and load (``cpu_kernels.load_decode_attention``).
    """

    def __init__(
        self, model: nn.Module, layer_fn: Callable[..., LayerOut] | None = None, native_attention: bool = True
    ) -> None:
        self.model = model
        self.layer_fn = layer_fn or prompt_layer
        param = next(model.parameters())
        self.native_attention = native_attention and param.device.type == "cpu" and param.dtype == torch.float32
        if self.native_attention:
            self.native_attention = load_decode_attention()
        self.heads = Heads.of(model.config)
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.valid: torch.Tensor | None = None  # [B, L] bool: key positions a query may attend to
        self.bias: torch.Tensor | None = None  # [B, L] fp: 0 where valid, -inf elsewhere (decode mask)
        self.cos = self.sin = self.signed_sin = self.columns = None
        # Per layer, the q/k/v projections stacked into one (weight, bias), rebuilt by every prefill (decode steps
        # then run one product for three: the k/v ones alone are too small for oneDNN); empty where oneDNN is off.
        self.qkv: list[tuple[torch.Tensor, torch.Tensor | None]] = []

    @staticmethod
    def supports(model: nn.Module, total_len: int) -> bool:
        """True when ``model`` is a plain Llama-family decoder this class reproduces exactly."""
        config = getattr(model, "config", None)
        inner = getattr(model, "model", None)
        if config is None or getattr(config, "model_type", None) not in _FAMILY or inner is None:
            return False
        if not all(hasattr(inner, name) for name in ("embed_tokens", "layers", "norm", "rotary_emb")):
            return False
        if getattr(inner.rotary_emb, "rope_type", "default") not in _STATIC_ROPE or not hasattr(model, "lm_head"):
            return False
        if total_len > getattr(config, "max_position_embeddings", total_len):
            return False
        from rlforge.parallel.fsdp import is_sharded

        if is_sharded(model):  # reading the weights directly would bypass FSDP's all-gathers: HF forward instead
            return False
        window = getattr(config, "sliding_window", None)
        layer_types = getattr(config, "layer_types", None) or []
        sliding = getattr(config, "use_sliding_window", True) and window is not None and window < total_len
        return not sliding and all(t == "full_attention" for t in layer_types)

    # ------------------------------------------------------------------------------------------ prefill
    def _prefill_layer(self, i: int, layer: nn.Module, x: torch.Tensor, cos, sin, mask, layer_fn) -> torch.Tensor:
        """One decoder layer on the prompts ``x`` ``[P, W, hidden]``; their keys/values go to columns ``:W``."""
        x, k, v = layer_fn(layer, x, cos, sin, mask, self.heads)
        b, t = k.shape[0], k.shape[2]
        self.keys[i][:b, :, :, :t] = k.transpose(2, 3)
        self.values[i][:b, :, :t] = v
        return x

    @torch.no_grad()
    def prefill(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, rows: torch.Tensor, max_new_tokens: int
    ) -> torch.Tensor:
        """Encodes the distinct left-padded prompts ``[P, W]`` once and copies their cache to ``rows``.

        Args:
            input_ids: Distinct prompts, left-padded, ``[P, W]``.
            attention_mask: Their mask (1 = token), ``[P, W]``.
            rows: For each sampled row, the index of its prompt, ``[B]``.
            max_new_tokens: Decode steps to reserve cache room for.

        Returns:
            The logits of each row's first response token, ``[B, V]`` (fp32).
        """
        inner, device = self.model.model, input_ids.device
        n_prompts, width = input_ids.shape
        batch = rows.numel()
        total = -(-(width + max_new_tokens) // CACHE_BUCKET) * CACHE_BUCKET
        param = next(self.model.parameters())
        self.cos, self.sin = rope_table(self.model, total, device)
        half = self.heads.dim // 2
        self.signed_sin = torch.cat((-self.sin[:, :half], self.sin[:, half:]), dim=-1)
        self.columns = torch.arange(total, device=device)
        # Zeros, not empty: columns past the current one are read (and masked) by a fixed-span step.
        # batch >= n_prompts: rows repeat prompts. Keys [B, H_kv, D, L], values [B, H_kv, L, D].
        self.keys = [param.new_zeros(batch, self.heads.n_kv, self.heads.dim, total) for _ in inner.layers]
        self.values = [param.new_zeros(batch, self.heads.n_kv, total, self.heads.dim) for _ in inner.layers]
        valid = attention_mask.bool()
        positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        mask = prompt_mask(attention_mask)
        self.qkv = (
            [stacked_qkv(layer.self_attn) for layer in inner.layers] if onednn_active(device, param.dtype) else []
        )
        x = inner.embed_tokens(input_ids)
        cos_p, sin_p = self.cos[positions].unsqueeze(1), self.sin[positions].unsqueeze(1)  # [P, 1, W, D]
        last = len(inner.layers) - 1
        for i, layer in enumerate(inner.layers):
            # The last layer runs eagerly: a second compiled graph for one call per generate would not pay.
            layer_fn = last_prompt_layer if i == last else self.layer_fn
            x = self._prefill_layer(i, layer, x, cos_p, sin_p, mask, layer_fn)
        logits = lm_head(self.model, _rms_norm(x[:, -1], inner.norm)).float()
        # Broadcast each prompt's cache to its rows (index_select copies first, so rows may overlap prompts),
        # unless every row samples its own prompt in order (n = 1), where the cache already is in place.
        if batch != n_prompts or not bool((rows == torch.arange(batch, device=device)).all()):
            for buf in self.keys:
                buf[:batch, :, :, :width] = buf[:n_prompts, :, :, :width].index_select(0, rows)
            for buf in self.values:
                buf[:batch, :, :width] = buf[:n_prompts, :, :width].index_select(0, rows)
        self.valid = torch.ones(batch, total, dtype=torch.bool, device=device)
        self.valid[:, :width] = valid.index_select(0, rows)
        self.bias = torch.zeros(batch, total, dtype=param.dtype, device=device).masked_fill_(~self.valid, -torch.inf)
        return logits.index_select(0, rows)

    # ------------------------------------------------------------------------------------------ decode
    def mark_length_dynamic(self) -> None:
        """Marks the cache length of every buffer a step reads as dynamic for ``torch.compile`` (after ``prefill``).

        One compiled step then serves every cache size; without it each ``CACHE_BUCKET`` compiled its own graph
        (seconds each on CPU), and past dynamo's limit of 8 graphs per function (prompts that grow, as in multi-turn
        episodes) compiled decoding gave up for the rest of the run.
        """
        mark = torch._dynamo.maybe_mark_dynamic
        for keys in self.keys:
            mark(keys, 3)
        for values in self.values:
            mark(values, 2)
        for table in (self.cos, self.signed_sin, self.columns):
            mark(table, 0)
        mark(self.bias, 1)

    def span_columns(self, span: int) -> torch.Tensor:
        """The cache columns a step attends to (pass to ``step``; its length is the step's one varying shape)."""
        return self.columns[:span]

    def step(
        self, tokens: torch.Tensor, positions: torch.Tensor, column: torch.Tensor, span: torch.Tensor
    ) -> torch.Tensor:
        """Feeds one token per row and returns the next logits ``[B, V]`` (fp32).

        Args:
            tokens: ``[B]`` token ids.
            positions: ``[B]`` their RoPE positions.
            column: 0-d long tensor, the cache column the new keys/values go to.
            span: ``span_columns(n)``: attention reads the first ``n > column`` cache columns and masks the
                ones after ``column``. A fixed ``n`` (the whole cache) makes the step's shapes static, as CUDA
                graphs need; a growing one reads only the filled part (a dynamic dimension when compiled).
        """
        inner, heads = self.model.model, self.heads
        b, d, n_kv = tokens.shape[0], heads.dim, heads.n_kv
        group = heads.n // n_kv
        x = inner.embed_tokens(tokens)
        cos, sin = self.cos[positions][:, None], self.signed_sin[positions][:, None]  # [B, 1, D]
        # Additive mask of this step, shared by every layer: padding and the columns after `column`.
        bias = torch.where(span <= column, self.bias[:, : span.shape[0]], -torch.inf)
        bias = bias.repeat_interleave(n_kv, 0)[:, None]  # [B * H_kv, 1, span]
        at = column.view(1)
        for i, layer in enumerate(inner.layers):
            attn = layer.self_attn
            stacked = self.qkv[i] if self.qkv else None
            q, k, v = project_qkv(attn, _rms_norm(x, layer.input_layernorm), heads, stacked=stacked)
            q, k = _rotate_signed(q, cos, sin), _rotate_signed(k, cos, sin)
            self.keys[i].index_copy_(3, at, k[..., None])
            self.values[i].index_copy_(2, at, v[:, :, None])
            keys_t = self.keys[i].view(b * n_kv, d, -1)[:, :, : span.shape[0]]
            values = self.values[i].view(b * n_kv, -1, d)[:, : span.shape[0]]
            q = q.view(b * n_kv, group, d)
            out = decode_attention(q, keys_t, values, bias, attn.scaling, self.native_attention).view(b, -1)
            x = mlp_residual(layer, _linear_add(x, out, attn.o_proj))
        return lm_head(self.model, _rms_norm(x, inner.norm)).float()

    def release(self) -> None:
        """Frees the cache buffers and the stacked projections."""
        self.keys, self.values, self.valid, self.bias, self.qkv = [], [], None, None, []
        self.cos = self.sin = self.signed_sin = self.columns = None
