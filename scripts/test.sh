#!/usr/bin/env bash
# The test suite: set up (virtual environment, dlscope, PyTorch, headless Chromium for the report's
# browser tests), lint, type-check, then run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
  # Debian's chromium: the report tests open the HTML report in it (headless, no network)
  SUDO=""
  if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"; fi
  if [ "$(id -u)" = 0 ] || [ -n "$SUDO" ]; then
    echo "setup: installing chromium (apt-get) for the browser tests"
    $SUDO apt-get install -y -q chromium >/dev/null 2>&1 \
      || { $SUDO apt-get update -q >/dev/null 2>&1 && $SUDO apt-get install -y -q chromium >/dev/null 2>&1; } \
      || echo "setup: could not install chromium; browser tests will be skipped"
  else
    echo "setup: chromium is missing and cannot be installed without root; browser tests will be skipped" \
         "(apt-get install -y chromium)"
  fi
fi
ruff check src tests bench examples
ruff format --check src tests bench examples
# types: strict on analysis, advice and application, standard elsewhere (pyproject.toml [tool.mypy])
mypy
python -m pytest -q "$@"
