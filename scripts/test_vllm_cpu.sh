#!/usr/bin/env bash
# Run the vLLM tests on CPU in .venv-vllm-cpu (build it first: bash scripts/make_vllm_cpu_env.sh).
export VLLM_ENABLE_V1_MULTIPROCESSING="${VLLM_ENABLE_V1_MULTIPROCESSING:-0}" VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}"
VENV="${VENV:-.venv-vllm-cpu}" BUILD=scripts/make_vllm_cpu_env.sh \
    DEFAULT_TESTS="tests/generation/test_vllm_generator.py tests/strategies/test_vllm_strategy.py tests/strategies/test_monarch_backends.py tests/parallel/test_vllm_data_parallel.py" \
    exec bash "$(dirname "$0")/_pytest_in_venv.sh" "$@"
