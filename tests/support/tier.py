"""The fast test tier (``./scripts/test.sh --fast``) and the guard that keeps it honest.

The full suite (CI, ``./scripts/test.sh``) runs every test. The fast tier deselects the tests marked
``server`` (a real Prometheus, Alertmanager, fleetscope exporter/service/demo process), ``browser``
(headless Chromium), ``torch``, ``vllm`` and ``slow`` (long CPU work: the detector evaluation, the
look-alike recordings, every promtool rule test). A test that starts one of those without its marker
would make the fast tier slow in silence; instead, under ``FLEETSCOPE_TEST_TIER=fast`` the guard
fails it at once, naming the marker it lacks.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

TIER_ENV = "FLEETSCOPE_TEST_TIER"
HEAVY_MARKERS = ("server", "browser", "torch", "vllm", "slow")
FAST_EXPRESSION = "not (" + " or ".join(HEAVY_MARKERS) + ")"

# Executables that are real servers or browsers, by basename.
_SERVER_BINARIES = {"prometheus": "server", "alertmanager": "server", "prometheus-alertmanager": "server"}
_BROWSER_BINARIES = {"chromium", "chromium-browser", "chrome", "google-chrome"}
# `python -m fleetscope <command>` that serves HTTP or runs the whole stack.
_SERVING_COMMANDS = {"serve", "exporter", "demo"}


def fast_tier() -> bool:
    return os.environ.get(TIER_ENV) == "fast"


def heavy_marker_for(argv: Sequence[Any]) -> str | None:
    """The marker a test needs to start ``argv``; None for an ordinary command."""
    if not argv:
        return None
    words = [str(a) for a in argv]
    name = Path(words[0]).name
    if name in _SERVER_BINARIES:
        return _SERVER_BINARIES[name]
    if name in _BROWSER_BINARIES:
        return "browser"
    if ".venv-vllm" in words[0]:
        return "vllm"
    if "-m" in words:
        i = words.index("-m")
        module = words[i + 1] if i + 1 < len(words) else ""
        command = words[i + 2] if i + 2 < len(words) else ""
        if module == "fleetscope" and command in _SERVING_COMMANDS:
            return "server"
        if module.startswith("vllm"):
            return "vllm"
    return None


class _GuardedPopen(subprocess.Popen):
    def __init__(self, args: Any, *rest: Any, **kwargs: Any) -> None:
        argv = [args] if isinstance(args, str | bytes | os.PathLike) else list(args)
        marker = heavy_marker_for(argv)
        if marker is not None:
            pytest.fail(
                f"this test starts {Path(str(argv[0])).name} {' '.join(map(str, argv[1:3]))}…: mark it "
                f"@pytest.mark.{marker} (the fast tier runs no real servers, browsers, torch or vLLM)",
                pytrace=False,
            )
        super().__init__(args, *rest, **kwargs)


class _TorchBlocker:
    """Fails any import of torch or vllm in the fast tier (they cost seconds each and belong to the full
    run)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        root = fullname.partition(".")[0]
        if root in ("torch", "vllm"):
            pytest.fail(f"this test imports {root}: mark it @pytest.mark.{root}", pytrace=False)
        return None


def install_guard() -> None:
    """Called once by the root conftest when the fast tier runs."""
    subprocess.Popen = _GuardedPopen  # type: ignore[misc]
    sys.meta_path.insert(0, _TorchBlocker())
