"""Per-token log-probabilities and entropies of responses under a causal LM.

GRPO batches hold each prompt ``G`` times. ``compute_logprobs`` runs each distinct prompt through the model
once and lets its ``G`` responses attend to that one KV cache (gradients from every response flow back
into the shared prompt pass), which is the same function as the full forward at a fraction of the prompt
cost. The LM head only runs on the positions that predict response tokens.
"""

from __future__ import annotations

import inspect
import warnings

import torch
from torch import nn

from rlforge.generation.compiled_step import shared_step
from rlforge.models.packed import packed_response_logits, supports_packed
from rlforge.parallel.fsdp import is_sharded
from rlforge.precision import autocast


def _params(model: nn.Module) -> set[str]:
    return set(inspect.signature(model.forward).parameters)


def _accepts(model: nn.Module, name: str) -> bool:
    return name in _params(model)


def _cache_kwarg(model: nn.Module) -> str:
    # transformers 5.x renamed `past_key_values` to `cache`; accept both.
    return "cache" if _accepts(model, "cache") else "past_key_values"


def response_logits(
    model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, prompt_len: int
) -> torch.Tensor:
    """Logits that predict each response token, ``[B, T, V]`` in fp32 (one full forward).

    The batch is laid out ``[left-padded prompt | right-padded response]``; positions follow the
    attention mask so left padding does not shift RoPE positions (the sampler does the same).
    """
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    keep = input_ids.shape[1] - prompt_len + 1
    extra = {"logits_to_keep": keep} if _accepts(model, "logits_to_keep") else {}
    out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False, **extra)
    return out.logits[:, -keep:-1, :].float()


def shared_prompt_rows(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, prompt_len: int
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(first row of each distinct prompt [P], prompt index of each row [B])``, or ``None`` if all differ."""
    key = torch.cat([input_ids[:, :prompt_len], attention_mask[:, :prompt_len]], dim=1)
    _, inverse = torch.unique(key, dim=0, return_inverse=True)
    n_prompts = int(inverse.max()) + 1
    if n_prompts == input_ids.shape[0]:
        return None
    first = torch.full((n_prompts,), input_ids.shape[0], dtype=torch.long, device=input_ids.device)
    first.scatter_reduce_(0, inverse, torch.arange(input_ids.shape[0], device=input_ids.device), reduce="amin")
    return first, inverse


def shared_prompt_logits(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    prompt_len: int,
    first: torch.Tensor,
    inverse: torch.Tensor,
) -> torch.Tensor:
    """``response_logits`` with each distinct prompt encoded once (rows of prompt ``i`` share its cache).

    Args:
        model: The causal LM (an HF model that takes a ``DynamicCache``).
        input_ids: ``[B, P + T]``, ``[left-padded prompt | right-padded response]``.
        attention_mask: ``[B, P + T]``.
        prompt_len: ``P``.
        first: A row index of each distinct prompt, ``[N]``.
        inverse: The distinct-prompt index of each row, ``[B]``.
    """
    from transformers import DynamicCache

    positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    prompt_mask = attention_mask[first, :prompt_len]
    cache, cache_kw = DynamicCache(), _cache_kwarg(model)
    out = model(
        input_ids=input_ids[first, :prompt_len],
        attention_mask=prompt_mask,
        position_ids=positions[first, :prompt_len],
        use_cache=True,
        logits_to_keep=1,
        **{cache_kw: cache},
    )
    first_logits = out.logits[:, -1:, :].index_select(0, inverse)  # predicts each row's first response token
    if input_ids.shape[1] - prompt_len == 1:
        return first_logits.float()
    cache.batch_select_indices(inverse)  # indexing, so gradients of all G rows reach the shared prompt pass
    out = model(
        input_ids=input_ids[:, prompt_len:-1],
        attention_mask=attention_mask[:, :-1],
        position_ids=positions[:, prompt_len:-1],
        use_cache=True,
        **{cache_kw: cache},
    )
    return torch.cat([first_logits, out.logits], dim=1).float()


def token_logprobs(logits: torch.Tensor, token_ids: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """``log softmax(logits / temperature)`` at ``token_ids`` without materialising all logprobs."""
    return token_stats(logits, token_ids, temperature, "none")[0]


def token_entropy(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Entropy of ``softmax(logits / temperature)`` at each position, ``[B, T]``."""
    logits = _scaled(logits, temperature)
    return _entropy(logits, torch.logsumexp(logits, dim=-1))


def token_stats(
    logits: torch.Tensor, token_ids: torch.Tensor, temperature: float, entropy: str
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``token_logprobs`` and, unless ``entropy == "none"``, ``token_entropy`` of ``[..., V]`` logits from one
    log-sum-exp, written so that ``torch.compile`` fuses them (the packed forward's compiled head).

    ``entropy``: ``"grad"`` keeps the entropy in the autograd graph, ``"detached"`` computes it from detached logits
    (logged only), ``"none"`` skips it.
    """
    logits = _scaled(logits, temperature)
    lse = torch.logsumexp(logits, dim=-1)
    logprobs = logits.gather(-1, token_ids.unsqueeze(-1)).squeeze(-1) - lse
    if entropy == "none":
        return logprobs, None
    return logprobs, _entropy(logits, lse) if entropy == "grad" else _entropy(logits.detach(), lse.detach())


def _scaled(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    return logits if temperature in (0.0, 1.0) else logits / temperature


def _entropy(logits: torch.Tensor, lse: torch.Tensor) -> torch.Tensor:
    logp = logits - lse.unsqueeze(-1)  # log_softmax
    return -(logp.exp() * logp).sum(-1)


def _entropy_mode(with_entropy: bool, entropy_grad: bool) -> str:
    """``token_stats``'s ``entropy`` argument for ``compute_logprobs``'s flags (no graph where grad is off)."""
    if not with_entropy:
        return "none"
    return "grad" if entropy_grad and torch.is_grad_enabled() else "detached"


def _packed_logprobs(
    model, input_ids, attention_mask, prompt_len, temperature, with_entropy, entropy_grad, compile, precision
):
    """``compute_logprobs`` through ``packed_response_logits``, unpacked to ``[B, T]`` with zeros past each response.

    With ``compile`` the logprobs and entropies come from ``token_stats`` compiled into fused kernels: over a real
    vocabulary the eager ops pass over the ``[N, V]`` logits several times, forward and backward (256 tokens over
    SmolLM2's 49k-token vocabulary: 214 -> 86 ms at 1 thread, ``benchmarks/README.md``).
    """
    shared = shared_prompt_rows(input_ids, attention_mask, prompt_len)
    if shared is None:  # every row its own prompt
        shared = (torch.arange(input_ids.shape[0], device=input_ids.device),) * 2
    with autocast(precision, input_ids.device):
        logits, valid = packed_response_logits(model, input_ids, attention_mask, prompt_len, *shared, compile=compile)
    zeros = torch.zeros(valid.shape, dtype=logits.dtype, device=logits.device)
    mode = _entropy_mode(with_entropy, entropy_grad)
    # Eager and compiled run the same function, so a failed compile's eager fall back gives the same numbers.
    stats = shared_step(token_stats, logits.device, "the logprob/entropy head") if compile else token_stats
    logprobs, entropy = stats(logits, input_ids[:, prompt_len:][valid], temperature, mode)
    return zeros.masked_scatter(valid, logprobs), None if entropy is None else zeros.masked_scatter(valid, entropy)


def compute_logprobs(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    prompt_len: int,
    temperature: float = 1.0,
    with_entropy: bool = False,
    share_prompts: bool = True,
    entropy_grad: bool = True,
    packed: bool = True,
    compile: bool = False,
    precision: str = "32-true",
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Response-token logprobs ``[B, T]`` (and entropies) from one pass over the batch.

    Args:
        model: The causal LM.
        input_ids: ``[B, P + T]``, ``[left-padded prompt | right-padded response]``.
        attention_mask: ``[B, P + T]``.
        prompt_len: ``P``.
        temperature: Logits are divided by it (0 and 1 leave them as they are).
        with_entropy: Also return per-token entropies.
        share_prompts: Encode each distinct prompt once (needs a model that takes a ``DynamicCache``).
        entropy_grad: Keep the entropy in the autograd graph (only needed when it is part of the loss).
        packed: Run the padding-free forward of ``rlforge.models.packed`` when the model supports it (prompts
            shared, only real response tokens through the GEMMs); positions past a row's response get 0.
        compile: Run the packed forward's layers through ``torch.compile`` (``packed_response_logits``). Other
            forwards (a model or batch the packed one does not support) run eagerly, with a warning.
        precision: ``32-true``, or ``bf16-mixed`` to run the forward under bf16 autocast (``rlforge.precision``);
            logprobs and entropies are computed from fp32 logits either way.
    """
    if packed and share_prompts and supports_packed(model, input_ids, attention_mask, prompt_len):
        return _packed_logprobs(
            model, input_ids, attention_mask, prompt_len, temperature, with_entropy, entropy_grad, compile, precision
        )
    if compile:
        warnings.warn(
            f"compile applies to the packed forward of Llama-family policies; this {type(model).__name__} batch "
            "runs the HF forward uncompiled (see rlforge.models.packed.supports_packed)",
            stacklevel=2,
        )
    share_prompts = share_prompts and _accepts(model, "logits_to_keep") and _cache_kwarg(model) in _params(model)
    shared = shared_prompt_rows(input_ids, attention_mask, prompt_len) if share_prompts else None
    if shared is None and share_prompts and is_sharded(model):
        # FSDP forwards are collectives: every rank runs the same two (prompts, then responses), whether or not
        # its rows share a prompt (GRPOModule(skip_zero_advantage=True) leaves each rank different rows).
        rows = torch.arange(input_ids.shape[0], device=input_ids.device)
        shared = rows, rows
    with autocast(precision, input_ids.device):
        if shared is None:
            logits = response_logits(model, input_ids, attention_mask, prompt_len)
        else:
            logits = shared_prompt_logits(model, input_ids, attention_mask, prompt_len, *shared)
    return token_stats(logits, input_ids[:, prompt_len:], temperature, _entropy_mode(with_entropy, entropy_grad))
