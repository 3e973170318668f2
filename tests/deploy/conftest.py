"""Shared helpers for the deployment tests (compose, Helm chart, systemd units, demo)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
