from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.support import tier

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
sys.path.insert(0, str(ROOT))

# Tests never reach the network and never read the developer's AWS credentials.
os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")


def pytest_configure(config: pytest.Config) -> None:
    if tier.fast_tier():
        tier.install_guard()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The fast tier deselects every test that carries a heavy marker (see tests/support/tier.py)."""
    if not tier.fast_tier():
        return
    keep = [item for item in items if not any(item.get_closest_marker(m) for m in tier.HEAVY_MARKERS)]
    dropped = [item for item in items if item not in keep]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES
