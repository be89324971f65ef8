"""A lean inference forward for Llama-family HF models (Llama, Qwen2, Qwen3, Mistral) over a static KV cache.

The HF forward spends most of a decode step in Python (mask building, cache objects, wrappers) on small
models, and its ``DynamicCache`` re-copies the whole cache every token. ``KVDecoder`` runs the same math
directly on the model's own parameters (no copies, so in-place weight updates are seen at once):
preallocated ``[B, H_kv, L, D]`` key/value buffers, a rotary table computed once by the model's own
rotary module, and the prompt encoded once per group and broadcast to the group's rows.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

_FAMILY = {"llama", "qwen2", "qwen3", "mistral"}
_STATIC_ROPE = {"default", "linear", "llama3", "yarn"}  # rope types whose tables do not depend on the length


def _rms_norm(x: torch.Tensor, norm: nn.Module) -> torch.Tensor:
    if x.dtype == torch.float32:  # one fused op, bit-identical to HF's fp32 path (measured)
        return F.rms_norm(x, (x.shape[-1],), norm.weight, norm.variance_epsilon)
    # HF normalises in fp32 and casts back before the weight multiply; same order here.
    return norm.weight * F.rms_norm(x.float(), (x.shape[-1],), None, norm.variance_epsilon).to(x.dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


class KVDecoder:
    """Prefill + one-token decode steps for a Llama-family causal LM (see module docstring).

    Use ``KVDecoder.supports(model, total_len)`` first; other architectures use the HF forward.

    Args:
        model: An HF ``*ForCausalLM`` of a supported family (``model.model.layers``, ``model.lm_head``).
    """

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        config = model.config
        self.n_heads = config.num_attention_heads
        self.n_kv = config.num_key_value_heads or self.n_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.n_heads
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.valid: torch.Tensor | None = None  # [B, L] bool: key positions a query may attend to
        self.cos = self.sin = None

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
        window = getattr(config, "sliding_window", None)
        layer_types = getattr(config, "layer_types", None) or []
        sliding = getattr(config, "use_sliding_window", True) and window is not None and window < total_len
        return not sliding and all(t == "full_attention" for t in layer_types)

    # ------------------------------------------------------------------------------------------ forward
    def _layer(
        self, i: int, layer: nn.Module, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, start: int
    ) -> torch.Tensor:
        """One decoder layer on ``x`` ``[B, T, hidden]`` whose tokens go to cache columns ``start:start+T``."""
        attn, mlp = layer.self_attn, layer.mlp
        b, t, _ = x.shape
        h = _rms_norm(x, layer.input_layernorm)
        q = F.linear(h, attn.q_proj.weight, attn.q_proj.bias).view(b, t, self.n_heads, self.head_dim)
        k = F.linear(h, attn.k_proj.weight, attn.k_proj.bias).view(b, t, self.n_kv, self.head_dim)
        v = F.linear(h, attn.v_proj.weight, attn.v_proj.bias).view(b, t, self.n_kv, self.head_dim)
        if getattr(attn, "q_norm", None) is not None:  # Qwen3: RMSNorm over each head before RoPE
            q, k = _rms_norm(q, attn.q_norm), _rms_norm(k, attn.k_norm)
        q, k = _rotate(q.transpose(1, 2), cos, sin), _rotate(k.transpose(1, 2), cos, sin)
        end = start + t
        self.keys[i][:b, :, start:end] = k
        self.values[i][:b, :, start:end] = v.transpose(1, 2)
        keys, values = self.keys[i][:b, :, :end], self.values[i][:b, :, :end]
        mask = self.valid[:b, None, None, :end]
        if t > 1:  # prefill: causal, and padding queries attend to themselves (keeps every row finite)
            query = torch.arange(end - t, end, device=x.device)[:, None]
            key = torch.arange(end, device=x.device)[None]
            mask = (mask & (key <= query)) | (key == query)
            out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=attn.scaling, enable_gqa=True)
            out = out.transpose(1, 2).reshape(b, t, -1)
        else:  # decode: the query heads of a KV group share one batched matmul (no K/V repeat; fastest measured)
            q = q.view(b, self.n_kv, self.n_heads // self.n_kv, self.head_dim)
            scores = (q @ keys.transpose(-1, -2)).mul_(attn.scaling).masked_fill_(~mask, float("-inf"))
            out = (scores.softmax(-1) @ values).view(b, 1, -1)
        x = x + F.linear(out, attn.o_proj.weight, attn.o_proj.bias)
        h = _rms_norm(x, layer.post_attention_layernorm)
        gate, up, down = mlp.gate_proj, mlp.up_proj, mlp.down_proj
        h = mlp.act_fn(F.linear(h, gate.weight, gate.bias)) * F.linear(h, up.weight, up.bias)
        return x + F.linear(h, down.weight, down.bias)

    def _forward(self, ids: torch.Tensor, positions: torch.Tensor, start: int) -> torch.Tensor:
        inner = self.model.model
        x = inner.embed_tokens(ids)
        cos, sin = self.cos[positions].unsqueeze(1), self.sin[positions].unsqueeze(1)  # [B, 1, T, D]
        for i, layer in enumerate(inner.layers):
            x = self._layer(i, layer, x, cos, sin, start)
        last = _rms_norm(x[:, -1], inner.norm)
        return self.model.lm_head(last).float()

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
        total, batch = width + max_new_tokens, rows.numel()
        param = next(self.model.parameters())
        table_pos = torch.arange(total, device=device)[None]
        cos, sin = inner.rotary_emb(param.new_zeros(1, total, self.head_dim), table_pos)
        self.cos, self.sin = cos[0].to(param.dtype), sin[0].to(param.dtype)
        shape = (batch, self.n_kv, total, self.head_dim)  # batch >= n_prompts: rows repeat prompts
        self.keys = [param.new_empty(shape) for _ in inner.layers]
        self.values = [param.new_empty(shape) for _ in inner.layers]
        self.valid = torch.ones(shape[0], total, dtype=torch.bool, device=device)
        self.valid[:n_prompts, :width] = attention_mask.bool()
        positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        logits = self._forward(input_ids, positions, 0)
        # Broadcast each prompt's cache to its rows (index_select copies first, so rows may overlap prompts).
        for buf in (*self.keys, *self.values):
            buf[:batch, :, :width] = buf[:n_prompts, :, :width].index_select(0, rows)
        self.valid[:batch, :width] = attention_mask.bool().index_select(0, rows)
        return logits.index_select(0, rows)

    @torch.no_grad()
    def step(self, tokens: torch.Tensor, positions: torch.Tensor, column: int) -> torch.Tensor:
        """Feeds one token per row (``[B]``, RoPE positions ``[B]``) at cache ``column``; returns ``[B, V]``."""
        return self._forward(tokens[:, None], positions[:, None], column)

    def release(self) -> None:
        """Frees the cache buffers."""
        self.keys, self.values, self.valid, self.cos, self.sin = [], [], None, None, None
