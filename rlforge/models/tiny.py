"""Tiny-model factory: a locally trained BPE tokenizer and a small Qwen3 built from a config.

Nothing here touches the network; models built this way save and reload by local path. The package
ships one such model, trained on the ``addition`` task, under ``rlforge/models/assets/default_policy``
(see ``scripts/make_default_policy.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedModel, PreTrainedTokenizerFast

__all__ = [
    "DEFAULT_POLICY_DIR",
    "EOS_TOKEN",
    "PAD_TOKEN",
    "TINY_CONFIG",
    "build_tiny_model",
    "generate_completions",
    "train_tokenizer",
]

PAD_TOKEN = "<|pad|>"
EOS_TOKEN = "<|endoftext|>"
DEFAULT_POLICY_DIR = Path(__file__).parent / "assets" / "default_policy"

TINY_CONFIG: dict[str, Any] = {
    "hidden_size": 128,
    "intermediate_size": 384,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "max_position_embeddings": 256,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
}
"""Defaults of ``build_tiny_model``: ~0.9M parameters with a ~300-token vocabulary."""


def train_tokenizer(texts: Iterable[str], vocab_size: int = 512) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer that splits every digit into its own token.

    Special tokens: ``<|pad|>`` (id 0, pad) and ``<|endoftext|>`` (id 1, eos and bos). Nothing is added
    automatically when encoding; append ``tokenizer.eos_token`` to supervised targets yourself. The
    padding side is ``left`` (set at construction so it is saved).

    Args:
        texts: Training texts (prompts and solutions).
        vocab_size: Upper bound of the vocabulary (256 byte tokens + 2 specials + merges).
    """
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[PAD_TOKEN, EOS_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD_TOKEN,
        eos_token=EOS_TOKEN,
        bos_token=EOS_TOKEN,
        padding_side="left",
        model_max_length=TINY_CONFIG["max_position_embeddings"],
    )


def build_tiny_model(tokenizer: PreTrainedTokenizerFast, seed: int = 0, **config_overrides: Any) -> PreTrainedModel:
    """Build a randomly initialised fp32 Qwen3 sized for CPU experiments.

    The global RNG is left untouched (initialisation runs under ``torch.random.fork_rng``). Embeddings
    are untied by default (vLLM does not reload a tied ``lm_head``); it costs ``vocab * hidden`` params.

    Args:
        tokenizer: Supplies the vocabulary size and the pad/eos/bos ids.
        seed: Seed of the weight initialisation.
        **config_overrides: Any ``Qwen3Config`` field, overriding ``TINY_CONFIG``.
    """
    fields = {**TINY_CONFIG, **config_overrides}
    config = AutoConfig.for_model(
        "qwen3",
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
        **fields,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    gen = model.generation_config
    gen.pad_token_id, gen.eos_token_id, gen.bos_token_id = config.pad_token_id, config.eos_token_id, None
    gen.do_sample, gen.max_new_tokens = False, 16
    return model


@torch.no_grad()
def generate_completions(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerFast,
    prompts: Sequence[str],
    max_new_tokens: int = 16,
    temperature: float = 0.0,
    num_return_sequences: int = 1,
    generator_seed: int | None = None,
) -> tuple[list[str], torch.Tensor, torch.Tensor]:
    """Decode a batch with HF ``generate`` (left padding); a small helper, not the library's sampler.

    Args:
        model: A causal LM.
        tokenizer: Its tokenizer (pad side left).
        prompts: Plain-text prompts.
        max_new_tokens: Response length cap.
        temperature: ``0`` for greedy decoding, else pure sampling at this temperature (no top-k/top-p).
        num_return_sequences: Samples per prompt (consecutive in the output).
        generator_seed: If set, sampling runs under a forked RNG seeded with it (global RNG untouched).

    Returns:
        ``(texts, prompt_ids, response_ids)``: decoded responses without special tokens, the padded
        prompt ids ``[B, P]`` repeated per sample, and response ids ``[B, R]`` padded with pad id after eos.
    """
    was_training = model.training
    model.eval()
    enc = tokenizer(list(prompts), return_tensors="pt", padding=True)
    kwargs: dict[str, Any] = {
        "max_new_tokens": max_new_tokens,
        "num_return_sequences": num_return_sequences,
        "pad_token_id": tokenizer.pad_token_id,
        "eos_token_id": tokenizer.eos_token_id,
    }
    if temperature > 0:
        kwargs.update(do_sample=True, temperature=temperature, top_k=0, top_p=1.0)
    else:
        kwargs.update(do_sample=False)
    with torch.random.fork_rng(devices=[], enabled=generator_seed is not None):
        if generator_seed is not None:
            torch.manual_seed(generator_seed)
        out = model.generate(**enc, **kwargs)
    model.train(was_training)
    prompt_len = enc["input_ids"].shape[1]
    prompt_ids, response_ids = out[:, :prompt_len], out[:, prompt_len:]
    texts = tokenizer.batch_decode(response_ids, skip_special_tokens=True)
    return texts, prompt_ids, response_ids
