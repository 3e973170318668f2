#!/usr/bin/env bash
# Sets up a fresh Debian/Ubuntu machine and runs the whole test suite: lint, format and type checks,
# generated-file check, then pytest (real Prometheus, promtool, Alertmanager, Chromium, vLLM on the
# CPU from .venv-vllm; no network).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh --with-vllm
echo "== ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "== mypy"
.venv/bin/mypy fleetscope
if [ -f fleetscope/generate.py ]; then
  echo "== fleetscope generate --check"
  .venv/bin/fleetscope generate --check
fi
echo "== pytest"
exec .venv/bin/python -m pytest -q "$@"
