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

import torch
from torch import nn

from rlforge.generation.cpu_kernels import load_decode_attention
from rlforge.generation.layers import (
    Heads,
    LayerOut,
    _linear_add,
    _rms_norm,
    _rotate_signed,
    last_prompt_layer,
    lm_head,
    mlp_residual,
    project_qkv,
    prompt_layer,
    prompt_mask,
    rope_table,
    stacked_qkv,
)

_FAMILY = {"llama", "qwen2", "qwen3", "mistral"}
_STATIC_ROPE = {"default", "linear", "llama3", "yarn"}  # rope types whose tables do not depend on the length
CACHE_BUCKET = 64  # cache lengths round up to a multiple of this, so compiled steps see few distinct shapes


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
        # Per layer, the q/k/v projections stacked into one (weight, bias), rebuilt by every prefill: on CPU decode
        # steps then run one product for three (the k/v ones alone are too small for oneDNN; with MKL the one
        # product was 1-3% off a generate, measured); empty on other devices.
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
        self.qkv = [stacked_qkv(layer.self_attn) for layer in inner.layers] if device.type == "cpu" else []
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
