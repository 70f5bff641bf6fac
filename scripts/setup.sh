#!/usr/bin/env bash
# Set-up shared by demo.sh and test.sh: a virtual environment in .venv with dlscope installed
# (editable) and PyTorch (the CPU build where that is what pip finds). Sourced, not run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
. .venv/bin/activate
export PIP_DISABLE_PIP_VERSION_CHECK=1
python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
if ! python -c "import torch" >/dev/null 2>&1; then
  echo "setup: installing PyTorch (torch==${TORCH_VERSION:-2.13.0})"
  python -m pip install -q "torch==${TORCH_VERSION:-2.13.0}"
fi
python -m pip install -q -e ".[${DLSCOPE_EXTRAS:-test}]"
# dlscope is installed editable, so its bytecode is written on first import, unless the
# environment forbids that (PYTHONDONTWRITEBYTECODE): then every command would compile its
# sources again (0.1 s of each). Compile them once here, as a regular install does.
python -m compileall -q src >/dev/null 2>&1 || true
