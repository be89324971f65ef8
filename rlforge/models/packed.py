"""Padding-free training forward: response tokens packed into one ``[N, hidden]`` stream.

An RL batch is ``[left-padded prompt | right-padded response]``; responses vary in length, so a padded forward
spends the projections, the MLP and the LM head (nearly all of a step's FLOPs) on pad positions as well. Here
each distinct prompt is encoded once (``[P, W]``, padded: prompts are short and shared by their group), and the
``N`` response tokens that predict another response token run as one packed stream: every GEMM, norm and
activation sees only real tokens. Position ids restart per sequence (each row continues from its own prompt
length). Attention alone is laid out ``[B, T - 1]`` for one batched SDPA call, whose bool mask lets a response
token see its prompt's cache and the earlier tokens of its own response: CPU SDPA has no varlen kernel, and
this keeps the whole layer at one attention call instead of one per row.

The layer math is ``KVDecoder``'s (``rlforge.generation.layers``) on the model's own parameters, so it covers the
same Llama-family models; ``supports_packed`` says when, and ``compute_logprobs`` falls back to the HF forward
otherwise (PEFT wrappers, sharded or gradient-checkpointed models, attention dropout, other architectures).

``compile=True`` runs the two layer functions through ``torch.compile`` (inductor, symbolic sizes, so one graph
each serves every layer and every batch shape): the norms, RoPE, SiLU gate and residuals fuse around the GEMMs.
A compile error falls back to eager with one warning (``CompiledStep``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from rlforge.generation.compiled_step import CompiledStep, shared_step
from rlforge.generation.decoder import KVDecoder
from rlforge.generation.layers import (
    Heads,
    _linear_add,
    _rms_norm,
    _rotate,
    attention,
    last_prompt_layer,
    lm_head,
    mlp_residual,
    project_qkv,
    prompt_layer,
    prompt_mask,
    rope_table,
)
from rlforge.generation.linear import ROW_ALIGN, onednn_active, padded_rows


def supports_packed(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, prompt_len: int) -> bool:
    """True when ``packed_response_hidden`` reproduces ``model``'s forward on this batch.

    The model must be a plain Llama-family decoder (``KVDecoder.supports``) without gradient checkpointing or
    attention dropout in training, and every response must be right-padded (its tokens first, then padding).
    """
    if not KVDecoder.supports(model, input_ids.shape[1]) or _checkpointed(model):
        return False
    if model.training and float(getattr(model.config, "attention_dropout", 0.0) or 0.0) > 0:
        return False
    valid = attention_mask[:, prompt_len:].bool()
    return bool((valid[:, 1:] <= valid[:, :-1]).all())


def _checkpointed(model: nn.Module) -> bool:
    # transformers >= 5.25 renamed the flag (the old name warns); either one means recomputation in the HF forward.
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):
        if hasattr(type(model), name) or hasattr(model, name):
            return bool(getattr(model, name))
    return False


def packed_response_logits(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    prompt_len: int,
    first: torch.Tensor,
    inverse: torch.Tensor,
    compile: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits of every response token, packed: ``([N_valid, V] fp32, valid [B, T] bool)``.

    Row ``i``'s logits are those of its tokens ``j < len_i`` in order, rows one after another (the order of
    ``valid``'s True entries), so ``torch.zeros(B, T).masked_scatter(valid, per_token)`` unpacks any per-token value.

    Args:
        model: A model for which ``supports_packed`` is True.
        input_ids: ``[B, P + T]``, ``[left-padded prompt | right-padded response]``.
        attention_mask: ``[B, P + T]``.
        prompt_len: ``P``.
        first: A row index of each distinct prompt, ``[N_p]``.
        inverse: The distinct-prompt index of each row, ``[B]``.
        compile: Run the layers compiled (``torch.compile``; the first call compiles: ~95 s on a 2-core CPU).
    """
    run_prompt, run_response = _compiled_layers(input_ids.device) if compile else (prompt_layer, _response_layer)
    inner, heads = model.model, Heads.of(model.config)
    batch, total = input_ids.shape
    width, device = prompt_len, input_ids.device
    valid = attention_mask[:, width:].bool()  # [B, T]: the response tokens
    feeds = valid[:, 1:]  # [B, T - 1]: response tokens fed to predict the next one
    fed = feeds.reshape(-1).nonzero().squeeze(-1)  # their flat indices into [B * (T - 1)]
    fed, aligned = _pad_stream(fed, feeds, inner.embed_tokens.weight)
    positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    cos, sin = rope_table(model, int(positions.max()) + 1, device)

    # Distinct prompts: padded, [N_p, W].
    prompt_ids, prompt_valid = input_ids[first, :width], attention_mask[first, :width]
    prompt_pos = positions[first, :width]
    if extra := _prompt_padding(first.numel(), width, inner.embed_tokens.weight):  # more left padding
        prompt_ids = F.pad(prompt_ids, (extra, 0))  # token 0: masked out
        prompt_valid, prompt_pos = F.pad(prompt_valid, (extra, 0)), F.pad(prompt_pos, (extra, 0))
    x_prompt = inner.embed_tokens(prompt_ids)
    cos_p, sin_p = cos[prompt_pos].unsqueeze(1), sin[prompt_pos].unsqueeze(1)
    mask_prompt = prompt_mask(prompt_valid)

    # Packed responses: [N, hidden], each token with its own position.
    stream_pos = positions[:, width:-1].reshape(-1).index_select(0, fed)
    x = inner.embed_tokens(input_ids[:, width:-1].reshape(-1).index_select(0, fed))
    cos_n, sin_n = cos[stream_pos].unsqueeze(1), sin[stream_pos].unsqueeze(1)  # [N, 1, D]
    attend = _response_mask(prompt_valid.bool().index_select(0, inverse), feeds)
    pad = _Padder(batch, feeds.shape[1], fed)

    last = len(inner.layers) - 1
    for i, layer in enumerate(inner.layers):
        # Past its keys and values, the prompt's last layer only feeds the prompt's last position (eager: a third
        # compiled function would cost another graph for one small call per step).
        if i == last:
            x_prompt, k_prompt, v_prompt = last_prompt_layer(layer, x_prompt, cos_p, sin_p, mask_prompt, heads)
        else:
            x_prompt, k_prompt, v_prompt = run_prompt(layer, x_prompt, cos_p, sin_p, mask_prompt, heads, bool(extra))
        if fed.numel():  # else every response has at most one token: its prompt predicts it
            x = run_response(layer, x, k_prompt, v_prompt, inverse, cos_n, sin_n, attend, pad, heads, aligned)

    # Row i's first token is predicted by its prompt's last position, token j > 0 by fed token j - 1.
    tail = torch.zeros(feeds.numel(), dtype=torch.long, device=device)
    tail[fed] = torch.arange(batch, batch + fed.numel(), device=device)
    source = torch.cat([torch.arange(batch, device=device)[:, None], tail.view(feeds.shape)], dim=1)
    hidden = torch.cat([x_prompt[:, -1].index_select(0, inverse), x]).index_select(0, source[valid])
    rows = hidden.shape[0]
    if onednn_active(hidden.device, hidden.dtype):  # a bucketed row count for oneDNN (generation/linear.py)
        hidden = F.pad(hidden, (0, 0, 0, padded_rows(rows) - rows))
    return lm_head(model, _rms_norm(hidden, inner.norm))[:rows].float(), valid


def _prompt_padding(prompts: int, width: int, weight: torch.Tensor) -> int:
    """Columns of left padding (0-15) that make the prompt pass's ``prompts x width`` rows a ``padded_rows`` bucket
    where oneDNN would run its products (``generation/linear.py``); 0 when none of them does."""
    if not onednn_active(weight.device, weight.dtype):
        return 0
    return next((e for e in range(ROW_ALIGN) if prompts * (width + e) == padded_rows(prompts * (width + e))), 0)


def _pad_stream(fed: torch.Tensor, feeds: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """``fed`` grown to ``padded_rows`` slots with unfed ones where oneDNN would run the stream's products, so they
    see a bucketed row count (``generation/linear.py``), and whether it was.

    An unfed slot (past its row's response) is masked out of every real token's keys (``_response_mask`` reads
    ``feeds``) and feeds no logit, so the extra rows change nothing but the work: at most ~6% more.
    """
    if not onednn_active(weight.device, weight.dtype) or not fed.numel():
        return fed, False
    extra = padded_rows(fed.numel()) - fed.numel()
    free = (~feeds).reshape(-1).nonzero().squeeze(-1)
    if extra > free.numel():  # the grid is nearly full: no room for the bucket
        return fed, False
    return torch.cat([fed, free[:extra]]).sort().values, True


class _Padder:
    """Moves packed rows ``[N, ...]`` into the padded layout ``[B, T, ...]`` and back (differentiable)."""

    def __init__(self, batch: int, width: int, fed: torch.Tensor) -> None:
        self.batch, self.width, self.fed = batch, width, fed

    def pad(self, packed: torch.Tensor) -> torch.Tensor:
        flat = packed.new_zeros(self.batch * self.width, *packed.shape[1:])
        return flat.index_copy(0, self.fed, packed).view(self.batch, self.width, *packed.shape[1:])

    def heads(self, packed: torch.Tensor) -> torch.Tensor:
        """``[N, H, D]`` -> ``[B, H, T, D]``, the layout SDPA takes."""
        return self.pad(packed).transpose(1, 2)

    def unpad(self, padded: torch.Tensor) -> torch.Tensor:
        return padded.reshape(self.batch * self.width, *padded.shape[2:]).index_select(0, self.fed)


def _response_mask(prompt_valid: torch.Tensor, feeds: torch.Tensor) -> torch.Tensor:
    """``[B, 1, T - 1, W + T - 1]`` bool: the row's prompt tokens, then its own fed tokens up to the query.

    A pad query sees its prompt (never an empty row, so SDPA stays finite); its output is dropped by ``unpad``.
    """
    steps = feeds.shape[1]
    query = torch.arange(steps, device=feeds.device)[:, None]
    causal = (torch.arange(steps, device=feeds.device)[None] <= query) & feeds[:, None, :]  # [B, T-1, T-1]
    prompt = prompt_valid[:, None, :].expand(-1, steps, -1)  # [B, T-1, W]
    return torch.cat([prompt, causal], dim=-1)[:, None]


def _response_layer(
    layer: nn.Module,
    x: torch.Tensor,
    k_prompt: torch.Tensor,
    v_prompt: torch.Tensor,
    inverse: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    attend: torch.Tensor,
    pad: _Padder,
    heads: Heads,
    aligned: bool = False,
) -> torch.Tensor:
    """One decoder layer on the packed response stream ``x`` ``[N, hidden]`` (``aligned``: ``N`` is a bucket)."""
    if aligned:  # lets a compiled graph's symbolic N prove its alignment to linear()
        torch._check(x.shape[0] % ROW_ALIGN == 0)
    attn = layer.self_attn
    q, k, v = project_qkv(attn, _rms_norm(x, layer.input_layernorm), heads)  # [N, H(_kv), D]
    q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
    # Each row's keys: its prompt's cache (gradients of all G rows flow back into the shared prompt pass).
    keys = torch.cat([k_prompt.index_select(0, inverse), pad.heads(k)], dim=2)
    values = torch.cat([v_prompt.index_select(0, inverse), pad.heads(v)], dim=2)
    out = attention(pad.heads(q), keys, values, attend, attn.scaling)  # [B, H, T - 1, D]
    out = pad.unpad(out.transpose(1, 2)).flatten(1)  # [N, H * D]
    return mlp_residual(layer, _linear_add(x, out, attn.o_proj))


def _compiled_layers(device: torch.device) -> tuple[CompiledStep, CompiledStep]:
    """The compiled prompt and response layer functions for ``device`` (``compiled_step.shared_step``)."""
    return tuple(
        shared_step(fn, device, f"the packed training forward ({fn.__name__})")
        for fn in (prompt_layer, _response_layer)
    )
