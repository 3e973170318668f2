#!/usr/bin/env bash
# Sets up a fresh Debian/Ubuntu machine and runs the fleetscope demo. Extra arguments go to
# `fleetscope demo` (e.g. --duration 300).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
exec .venv/bin/fleetscope demo "$@"
