#!/usr/bin/env bash
# Sets up a fresh Debian/Ubuntu machine and runs the whole test suite: lint, format and type checks,
# generated-file check, then pytest (real Prometheus, promtool, Alertmanager, Chromium, vLLM on the
# CPU from .venv-vllm; no network).
#
# --fast: the inner loop. Lint and format checks, then the unit and contract tests only: no real
# servers, browsers, torch or vLLM, no detector evaluation (tests/support/tier.py says what is left
# out and fails a test that starts one of them without its marker). Under 3 minutes on 2 cores.
# Other arguments go to pytest.
#
# pytest runs the tests on $FLEETSCOPE_TEST_WORKERS processes (pytest-xdist; default 2, the CI
# machine's cores): most of a server test's time is waiting on its server, and the fast tier is all
# CPU. On this project's 2-core VM the whole suite took 9 min 18 s on 2 workers (about 18 min on
# one) and the fast tier 2 min 22 s (5 min 22 s then). FLEETSCOPE_TEST_WORKERS=0 runs them in one process.
set -euo pipefail
cd "$(dirname "$0")/.."
FAST=0
WORKERS=(-n "${FLEETSCOPE_TEST_WORKERS:-2}")
if [ "${1:-}" = "--fast" ]; then
  FAST=1
  shift
fi
if [ "$FAST" = 1 ]; then
  ./scripts/setup.sh
else
  ./scripts/setup.sh --with-vllm
fi
echo "== ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
if [ "$FAST" = 1 ]; then
  echo "== pytest (fast tier)"
  FLEETSCOPE_TEST_TIER=fast exec .venv/bin/python -m pytest -q "${WORKERS[@]}" "$@"
fi
echo "== mypy"
.venv/bin/mypy fleetscope
if [ -f fleetscope/generate.py ]; then
  echo "== fleetscope generate --check"
  .venv/bin/fleetscope generate --check
fi
echo "== pytest"
exec .venv/bin/python -m pytest -q "${WORKERS[@]}" "$@"
