#!/usr/bin/env bash
# Short GRPO run on one GPU (vLLM generator + torchtitan backend); prints tokens/s, step time and sync time.
# Needs a CUDA GPU and `pip install -e '.[vllm,titan]'`; fails with a clear message otherwise.
#   bash scripts/gpu_check.sh [--steps 6] [--model PATH_OR_HUB_ID] [--out runs/gpu_check]
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec python scripts/gpu_check.py "$@"
