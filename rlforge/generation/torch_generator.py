"""Pure-PyTorch batched sampler with a KV cache for Hugging Face causal LMs."""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn

from rlforge.generation.params import SamplingParams
from rlforge.types import Completion


def filter_logits(logits: torch.Tensor, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """Masks logits outside the top-k set and the top-p nucleus with ``-inf``."""
    if top_k > 0 and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        cum = sorted_logits.softmax(-1).cumsum(-1)
        # Drop a token once the mass before it already reaches top_p; the first token always stays.
        drop_sorted = (cum - sorted_logits.softmax(-1)) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def eos_token_ids(tokenizer: Any, model: nn.Module | None = None) -> list[int]:
    """All ids that end a response: the tokenizer's EOS plus the model's generation-config EOS."""
    ids: set[int] = set()
    for source in (
        tokenizer.eos_token_id,
        getattr(getattr(model, "generation_config", None), "eos_token_id", None),
    ):
        if isinstance(source, int):
            ids.add(source)
        elif source:
            ids.update(source)
    if not ids:
        raise ValueError("the tokenizer has no eos_token_id: set one so responses can end")
    return sorted(ids)


def _cache_kwarg(model: nn.Module) -> str:
    # transformers 5.x renamed `past_key_values` to `cache`; accept both.
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


class TorchGenerator:
    """Samples from an HF causal LM in plain PyTorch.

    Prompts are left-padded into one batch (each repeated ``n`` times), encoded once, then decoded
    token by token with a ``DynamicCache``. The returned logprobs are those of the sampled tokens under
    ``softmax(logits / temperature)`` (before top-k/top-p filtering), which is exactly what the trainer
    recomputes, so ratios start at 1.

    Args:
        model: A causal LM (``forward(input_ids, attention_mask, position_ids, cache)``).
        tokenizer: Its tokenizer (decodes responses; supplies pad and EOS ids).
        seed: Seed of the sampler's own RNG (kept in ``state_dict`` for exact resume).
        policy_version: Version of the weights the model currently holds.
    """

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Any,
        seed: int = 0,
        policy_version: int = 0,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.eos_token_ids = eos_token_ids(tokenizer, model)
        self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_token_ids[0]
        self.policy_version = policy_version
        self.device = next(model.parameters()).device
        self.rng = torch.Generator(device=self.device)
        self.rng.manual_seed(seed)
        self._cache_kw = _cache_kwarg(model)

    def update_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        """Copies ``state_dict`` into the sampler's model in place and records ``version``."""
        self.model.load_state_dict(state_dict, strict=True)
        self.policy_version = version

    def weights_state_dict(self) -> dict[str, torch.Tensor]:
        """The sampler's current weights (HF names), e.g. to save stale generator weights for resume."""
        return self.model.state_dict()

    def state_dict(self) -> dict[str, Any]:
        return {"rng": self.rng.get_state(), "policy_version": self.policy_version}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.set_state(state["rng"])
        self.policy_version = int(state["policy_version"])

    def _forward(self, input_ids, attention_mask, position_ids, cache) -> torch.Tensor:
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=True,
            logits_to_keep=1,
            **{self._cache_kw: cache},
        )
        return out.logits[:, -1, :].float()

    @torch.no_grad()
    def generate(self, prompt_ids: list[list[int]], params: SamplingParams) -> list[list[Completion]]:
        """Samples ``params.n`` completions per prompt (see class docstring)."""
        from transformers import DynamicCache

        if not prompt_ids:
            return []
        if any(len(p) == 0 for p in prompt_ids):
            raise ValueError("generate: every prompt must have at least one token")
        rows = [p for p in prompt_ids for _ in range(params.n)]
        batch, width = len(rows), max(len(p) for p in rows)
        input_ids = torch.full((batch, width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((batch, width), dtype=torch.long)
        for i, p in enumerate(rows):
            input_ids[i, width - len(p) :] = torch.tensor(p)
            attention_mask[i, width - len(p) :] = 1
        input_ids, attention_mask = input_ids.to(self.device), attention_mask.to(self.device)
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)

        stop_ids = torch.tensor(sorted(set(self.eos_token_ids) | set(params.stop_token_ids)), device=self.device)
        tokens = torch.full((batch, params.max_new_tokens), self.pad_token_id, dtype=torch.long, device=self.device)
        logprobs = torch.zeros((batch, params.max_new_tokens), device=self.device)
        lengths = torch.zeros(batch, dtype=torch.long, device=self.device)
        finished = torch.zeros(batch, dtype=torch.bool, device=self.device)
        stopped = torch.zeros(batch, dtype=torch.bool, device=self.device)

        was_training = self.model.training
        self.model.eval()
        cache = DynamicCache()
        logits = self._forward(input_ids, attention_mask, position_ids, cache)
        next_pos = position_ids[:, -1:] + 1
        for t in range(params.max_new_tokens):
            scaled = logits if params.greedy else logits / params.temperature
            logp = torch.log_softmax(scaled, dim=-1)
            if params.greedy:
                tok = scaled.argmax(-1)
            else:
                probs = filter_logits(scaled, params.top_k, params.top_p).softmax(-1)
                tok = torch.multinomial(probs, 1, generator=self.rng).squeeze(-1)
            tok = torch.where(finished, torch.full_like(tok, self.pad_token_id), tok)
            tokens[:, t] = tok
            logprobs[:, t] = logp.gather(-1, tok[:, None]).squeeze(-1)
            lengths += (~finished).long()
            hit_stop = torch.isin(tok, stop_ids) & ~finished
            stopped |= hit_stop
            finished |= hit_stop
            if t + 1 == params.max_new_tokens or bool(finished.all()):
                break
            attention_mask = torch.cat([attention_mask, attention_mask.new_ones((batch, 1))], dim=1)
            logits = self._forward(tok[:, None], attention_mask, next_pos, cache)
            next_pos = next_pos + 1
        self.model.train(was_training)

        tokens_l, logprobs_l, lengths_l, stopped_l = (
            tokens.tolist(),
            logprobs.tolist(),
            lengths.tolist(),
            stopped.tolist(),
        )
        out: list[list[Completion]] = []
        for i, prompt in enumerate(rows):
            n_tok = lengths_l[i]
            completion = Completion(
                text=self.tokenizer.decode(tokens_l[i][:n_tok], skip_special_tokens=True),
                token_ids=tokens_l[i][:n_tok],
                logprobs=logprobs_l[i][:n_tok],
                prompt_ids=list(prompt),
                stop_reason="stop" if stopped_l[i] else "length",
                policy_version=self.policy_version,
            )
            if i % params.n == 0:
                out.append([])
            out[-1].append(completion)
        return out
