#!/usr/bin/env bash
# Run the torchtitan-backend tests on CPU in .venv-titan (build it first: bash scripts/make_titan_env.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv-titan}"
if [ ! -x "$VENV/bin/python" ]; then
    echo "error: $VENV not found; build it with: bash scripts/make_titan_env.sh" >&2
    exit 1
fi
. "$VENV/bin/activate"
export PYTHONPATH="$PWD" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
if [ "$#" -eq 0 ]; then set -- tests/models/test_titan_backend.py tests/models/test_titan_fsdp.py; fi
python -m pytest -ra -s -p no:cacheprovider "$@"
