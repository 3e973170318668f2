"""Shared fixtures of the exporter tests: the p5.48xlarge tree, and a private copy to mutate."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import FIXTURES

P5 = FIXTURES / "p5"
P5_OLD_DRIVER = FIXTURES / "p5-old-efa-driver"
#: The 32 EFA devices of a p5.48xlarge, as the fixture names them.
P5_EFA_DEVICES = sorted(
    (d.name for d in (P5 / "sys" / "class" / "infiniband").iterdir() if d.name.startswith("rdmap")),
    key=lambda n: int(n[5:].split("s")[0]),
)


def tree_flags(root: Path) -> list[str]:
    """The exporter's root flags for a fixture tree laid out like a node's /."""
    return [
        f"--path.sysfs={root / 'sys'}",
        f"--path.procfs={root / 'proc'}",
        f"--path.debugfs={root / 'sys' / 'kernel' / 'debug'}",
    ]


@pytest.fixture
def p5_copy(tmp_path: Path) -> Path:
    """A private copy of the p5 tree (symlinks kept as links) that a test may change."""
    dest = tmp_path / "p5"
    shutil.copytree(P5, dest, symlinks=True)
    return dest
