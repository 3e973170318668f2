from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
sys.path.insert(0, str(ROOT))

# Tests never reach the network and never read the developer's AWS credentials.
os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES
