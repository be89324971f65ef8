#!/usr/bin/env bash
# Build .venv-titan: a separate venv with torchtitan for the titan-backend tests on CPU.
#
# torchtitan 0.3.0 pins datasets<4.8 and imports only with `triton` installed (~1 GB), so it lives apart from
# the main dev env. Usage: [VENV=DIR] bash scripts/make_titan_env.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# The venv folder comes from $VENV, like scripts/test_*_cpu.sh (a first argument still works).
VENV="${1:-${VENV:-.venv-titan}}"

python3 -m venv "$VENV"
. "$VENV/bin/activate"
python -m pip install -q --upgrade pip
# The CPU wheel first, so nothing below can resolve torch to a CUDA build.
# TORCH_INDEX_URL: e.g. PyTorch's CPU wheel index on a machine where plain PyPI gives the CUDA build.
pip install -q torch==2.13.0 ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"}
pip install -q -e ".[dev,titan]" triton

python - <<'PY'
import torch, torchtitan, datasets
assert torch.__version__ == "2.13.0+cpu", f"pip swapped torch: {torch.__version__}"
print(f"torch {torch.__version__}, torchtitan {torchtitan.__version__ if hasattr(torchtitan, '__version__') else '?'}, "
      f"datasets {datasets.__version__}")
PY
