"""Shared fixtures of the exporter tests: the p5.48xlarge tree, and a private copy to mutate."""

from __future__ import annotations

import shutil
import subprocess
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


def copy_tree(src: Path, dest: Path) -> None:
    """Copy a fixture tree, symlinks kept as links (``cp -a`` is ten times faster than copytree)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    if shutil.which("cp"):
        subprocess.run(["cp", "-a", str(src), str(dest)], check=True, timeout=60)
    else:
        shutil.copytree(src, dest, symlinks=True)


@pytest.fixture
def p5_copy(tmp_path: Path) -> Path:
    """A private copy of the p5 tree's EFA part (``sys/class/infiniband``) that a test may change."""
    dest = tmp_path / "p5"
    copy_tree(P5 / "sys" / "class" / "infiniband", dest / "sys" / "class" / "infiniband")
    return dest
