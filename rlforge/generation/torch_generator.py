"""Pure-PyTorch batched sampler with a KV cache for Hugging Face causal LMs."""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn

from rlforge.generation.compiled_step import CompiledStep
from rlforge.generation.decoder import KVDecoder
from rlforge.generation.layers import prompt_layer
from rlforge.generation.params import SamplingParams
from rlforge.generation.sampling import draw_uniforms, filter_logits, sample_tokens
from rlforge.types import Completion

__all__ = ["TorchGenerator", "eos_token_ids", "filter_logits"]

# Decode steps between host checks for "every row has stopped", the loop's only host sync. On an accelerator a
# sync drains the queue, so it is rare; on CPU it costs nothing and every step checked ends the loop soonest.
EOS_CHECK_EVERY = {"cpu": 1}
EOS_CHECK_EVERY_DEFAULT = 8


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

    The distinct prompts are left-padded into one batch and encoded once; each prompt's KV cache is then
    shared by its ``n`` sampled rows, which are decoded token by token until every row has stopped.
    Llama-family models (Llama, Qwen2/3, Mistral) decode with ``KVDecoder`` (a lean forward over a
    preallocated cache); any other causal LM uses its HF forward with a ``DynamicCache``. The returned
    logprobs are those of the sampled tokens under ``softmax(logits / temperature)`` (before top-k/top-p
    filtering), which is exactly what the trainer recomputes, so ratios start at 1.

    Args:
        model: A causal LM (``forward(input_ids, attention_mask, position_ids, cache)``).
        tokenizer: Its tokenizer (decodes responses; supplies pad and EOS ids).
        seed: Seed of the sampler's own RNG (kept in ``state_dict`` for exact resume).
        policy_version: Version of the weights the model currently holds.
        static_cache: Decode supported architectures with ``KVDecoder`` (``False``: always the HF forward).
        compile: Run the ``KVDecoder`` decode step (forward and sampling; on CPU one graph per batch size and sampling
            config, for every cache length; on CUDA one per cache bucket, static for CUDA graphs) and the
            prefill's layers through ``torch.compile``: ``True`` from the first call, ``False`` never, ``"auto"``
            once this generator's eager decodes have taken ``compile_after_s`` seconds (so short runs never pay
            the compile). A failed compile falls back to eager with a warning. See
            ``rlforge/generation/compiled_step.py``.
        compile_after_s: The eager decode time after which ``compile="auto"`` compiles.
        cpu_kernels: On CPU with fp32 weights, decode attention through rlforge's native kernels (built with the
            system C++ compiler on first use, ~5-20 s once per machine; ``torch.bmm`` with a warning if the build
            fails). See ``rlforge/generation/cpu_kernels.py``.
    """

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Any,
        seed: int = 0,
        policy_version: int = 0,
        static_cache: bool = True,
        compile: bool | str = "auto",
        compile_after_s: float = 60.0,
        cpu_kernels: bool = True,
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
        self.use_kv_decoder = static_cache
        self.cpu_kernels = cpu_kernels
        # On CPU the decode step's kernels are called from C++ instead of inductor's Python wrapper: a step's fixed
        # cost goes from ~0.78 to ~0.55 ms (batch 64: 4.5% of a 1-thread generate, 9% at 2 threads; the compile
        # takes as long). On CUDA the Python wrapper stays, the path CUDA graphs take.
        options = {"cpp_wrapper": True} if self.device.type == "cpu" else None
        self.decode_step = CompiledStep(_decode_step, compile, compile_after_s, options=options)
        # The prefill's layers compile with the decode step (symbolic sizes: prompt count and width vary).
        self.prefill_layer = CompiledStep(prompt_layer, True, dynamic=True, name="the prefill layer")

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

    def _decode(self, first_logits: torch.Tensor, advance, params: SamplingParams):
        """The sampling loop shared by both forwards.

        ``advance(tok, t, uniforms)`` feeds the tokens sampled at step ``t - 1`` and returns step ``t``'s
        ``(tokens, logprobs)``. Rows that stopped keep decoding (rows are independent) until every row has
        stopped, which is checked on the host every ``EOS_CHECK_EVERY`` steps; lengths are cut afterwards.
        """
        batch, steps = first_logits.shape[0], params.max_new_tokens
        stop_ids = torch.tensor(sorted(set(self.eos_token_ids) | set(params.stop_token_ids)), device=self.device)
        uniforms = None if params.greedy else self._uniforms(steps, batch, params)
        tokens = torch.empty((steps, batch), dtype=torch.long, device=self.device)
        logprobs = torch.empty((steps, batch), device=self.device)
        u = None if uniforms is None else uniforms[0]
        tok, logp = sample_tokens(first_logits, u, params.temperature, params.top_k, params.top_p)
        tokens[0], logprobs[0] = tok, logp
        finished = torch.isin(tok, stop_ids)
        check_every, n_steps = EOS_CHECK_EVERY.get(self.device.type, EOS_CHECK_EVERY_DEFAULT), steps
        for t in range(1, steps):
            if t % check_every == 0 and bool(finished.all()):
                n_steps = t
                break
            tok, logp = advance(tok, t, None if uniforms is None else uniforms[t])
            tokens[t], logprobs[t] = tok, logp
            finished |= torch.isin(tok, stop_ids)
        tokens, logprobs = tokens[:n_steps].T, logprobs[:n_steps].T
        # A row's length: its tokens up to and including its first stop token (all sampled ones if none).
        hit = torch.isin(tokens, stop_ids)
        stopped = hit.any(-1)
        lengths = torch.where(stopped, hit.int().argmax(-1) + 1, n_steps)
        return tokens, logprobs, lengths, stopped

    def _uniforms(self, steps: int, batch: int, params: SamplingParams) -> torch.Tensor:
        """The ``[steps, batch]`` uniforms of a request: from this generator's stream, or with ``params.seed`` from
        one generator per prompt seeded ``seed + i`` (rows are prompt-major, ``n`` per prompt)."""
        if params.seed is None:
            return draw_uniforms(steps, batch, self.rng, self.device)
        rng = torch.Generator(device=self.device)
        parts = []
        for i in range(batch // params.n):
            rng.manual_seed((params.seed + i) % 2**63)
            parts.append(draw_uniforms(steps, params.n, rng, self.device))
        return torch.cat(parts, dim=1)

    def _decode_static(self, input_ids, attention_mask, rows, params):
        layer_fn = self.prefill_layer if self.decode_step.active else prompt_layer
        decoder = KVDecoder(self.model, layer_fn, native_attention=self.cpu_kernels)
        try:
            logits = decoder.prefill(input_ids, attention_mask, rows, params.max_new_tokens)
            width, steps = input_ids.shape[1], params.max_new_tokens
            positions = (
                attention_mask.sum(-1).index_select(0, rows)[None] + torch.arange(steps, device=self.device)[:, None]
            )  # [steps, B]: RoPE position of the token fed at each step
            columns = torch.arange(width, width + steps, device=self.device)
            # Attend over the filled part of the cache only; compiled on CUDA, over all of it (static shapes,
            # as CUDA graphs need).
            compiled = self.decode_step.active
            static = compiled and self.device.type == "cuda"
            if compiled and not static:
                decoder.mark_length_dynamic()
            sampling = (params.temperature, params.top_k, params.top_p)

            def advance(tok, t, u):
                span = decoder.span_columns(decoder.columns.shape[0] if static else width + t)
                if compiled and not static:
                    torch._dynamo.maybe_mark_dynamic(span, 0)  # one compiled graph for every length
                args = (decoder, tok, positions[t - 1], columns[t - 1], span, u, *sampling)
                if t == 1:
                    return self.decode_step(*args)
                with self.decode_step.reusing_graph():
                    return self.decode_step(*args)

            with self.decode_step.timed():
                return self._decode(logits, advance, params)
        finally:
            decoder.release()

    def _decode_hf(self, input_ids, attention_mask, rows, params):
        from transformers import DynamicCache

        cache = DynamicCache()
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        logits = self._forward(input_ids, attention_mask, position_ids, cache)
        if params.n > 1:  # the rows of a prompt are consecutive
            cache.batch_repeat_interleave(params.n)
        width = input_ids.shape[1]
        full_mask = torch.ones((rows.numel(), width + params.max_new_tokens), dtype=torch.long, device=self.device)
        full_mask[:, :width] = attention_mask.index_select(0, rows)
        next_pos = attention_mask.sum(-1).index_select(0, rows)

        def advance(tok, t, u):
            step_logits = self._forward(tok[:, None], full_mask[:, : width + t], (next_pos + t - 1)[:, None], cache)
            return sample_tokens(step_logits, u, params.temperature, params.top_k, params.top_p)

        return self._decode(logits.index_select(0, rows), advance, params)

    @torch.no_grad()
    def generate(self, prompt_ids: list[list[int]], params: SamplingParams) -> list[list[Completion]]:
        """Samples ``params.n`` completions per prompt (see class docstring)."""
        if not prompt_ids:
            return []
        if any(len(p) == 0 for p in prompt_ids):
            raise ValueError("generate: every prompt must have at least one token")
        n_prompts, width = len(prompt_ids), max(len(p) for p in prompt_ids)
        input_ids = torch.full((n_prompts, width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((n_prompts, width), dtype=torch.long)
        for i, p in enumerate(prompt_ids):
            input_ids[i, width - len(p) :] = torch.tensor(p)
            attention_mask[i, width - len(p) :] = 1
        input_ids, attention_mask = input_ids.to(self.device), attention_mask.to(self.device)
        # Row r samples prompt rows[r]: each prompt is encoded once and its cache shared by its n rows.
        rows = torch.arange(n_prompts, device=self.device).repeat_interleave(params.n)

        was_training = self.model.training
        self.model.eval()
        try:
            if self.use_kv_decoder and KVDecoder.supports(self.model, width + params.max_new_tokens):
                tokens, logprobs, lengths, stopped = self._decode_static(input_ids, attention_mask, rows, params)
            else:
                tokens, logprobs, lengths, stopped = self._decode_hf(input_ids, attention_mask, rows, params)
        finally:
            self.model.train(was_training)
        rows_l = rows.tolist()
        tokens_l, logprobs_l, lengths_l, stopped_l = (
            tokens.tolist(),
            logprobs.tolist(),
            lengths.tolist(),
            stopped.tolist(),
        )
        out: list[list[Completion]] = []
        for i, prompt_index in enumerate(rows_l):
            n_tok, prompt = lengths_l[i], prompt_ids[prompt_index]
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


def _decode_step(decoder: KVDecoder, tokens, positions, column, span, uniforms, temperature, top_k, top_p):
    """One KVDecoder step and the sampling of its logits: the unit ``torch.compile`` turns into one graph."""
    logits = decoder.step(tokens, positions, column, span)
    return sample_tokens(logits, uniforms, temperature, top_k, top_p)
