#!/usr/bin/env bash
# Shared runner of scripts/test_*_cpu.sh: pytest inside a backend's own venv, against this checkout.
# Inputs (environment): VENV (the venv folder), BUILD (the script that builds it), DEFAULT_TESTS (run when no
# arguments are given).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x "$VENV/bin/python" ]; then
    echo "error: $VENV not found; build it with: bash $BUILD" >&2
    exit 1
fi
. "$VENV/bin/activate"
export PYTHONPATH="$PWD" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
if [ "$#" -eq 0 ]; then read -r -a tests <<< "$DEFAULT_TESTS"; set -- "${tests[@]}"; fi
python -m pytest -ra -s -p no:cacheprovider "$@"
