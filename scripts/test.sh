#!/usr/bin/env bash
# The test suite: set up (virtual environment, dlscope, PyTorch), lint, then run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
ruff check src tests bench examples
python -m pytest -q "$@"
