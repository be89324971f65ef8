#!/usr/bin/env bash
# Run the torchtitan-backend tests on CPU in .venv-titan (build it first: bash scripts/make_titan_env.sh).
VENV="${VENV:-.venv-titan}" BUILD=scripts/make_titan_env.sh \
    DEFAULT_TESTS="tests/models/test_titan_backend.py tests/models/test_titan_fsdp.py tests/models/test_titan_data_parallel.py tests/strategies/test_monarch_backends.py" \
    exec bash "$(dirname "$0")/_pytest_in_venv.sh" "$@"
