#!/usr/bin/env bash
# Build .venv-titan: a separate venv with torchtitan for the titan-backend tests on CPU.
#
# torchtitan 0.3.0 pins datasets<4.8 and imports only with `triton` installed (~1 GB), so it lives apart from
# the main dev env. Usage: bash scripts/make_titan_env.sh [VENV_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-.venv-titan}"

python3 -m venv "$VENV"
. "$VENV/bin/activate"
python -m pip install -q --upgrade pip
# The CPU wheel first, so nothing below can resolve torch to a CUDA build.
pip install -q torch==2.13.0
pip install -q -e ".[dev,titan]" triton

python - <<'PY'
import torch, torchtitan, datasets
assert torch.__version__ == "2.13.0+cpu", f"pip swapped torch: {torch.__version__}"
print(f"torch {torch.__version__}, torchtitan {torchtitan.__version__ if hasattr(torchtitan, '__version__') else '?'}, "
      f"datasets {datasets.__version__}")
PY
