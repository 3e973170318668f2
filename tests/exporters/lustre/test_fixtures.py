"""The fixture trees are what their sources say they are."""

from __future__ import annotations

import filecmp
import shutil
from pathlib import Path

from tests.conftest import ROOT
from tests.exporters.lustre.helpers import FIXTURES, LUSTRE
from tests.exporters.lustre.lctl_dump import write_tree

REAL = ROOT.parent / "shared" / "fixtures-real"


def test_214_tree_is_exactly_the_converted_real_dump(tmp_path: Path) -> None:
    written = write_tree(LUSTRE / "2.14" / "llite_client.txt", tmp_path)
    assert written == [
        "sys/fs/lustre/health_check",
        "sys/kernel/debug/lustre/llite/ai400x2-ff47bce9ca35d800/stats",
    ]
    committed = sorted(
        str(p.relative_to(LUSTRE / "2.14")) for p in (LUSTRE / "2.14" / "sys").rglob("*") if p.is_file()
    )
    assert committed == written
    for rel in written:
        assert (tmp_path / rel).read_bytes() == (LUSTRE / "2.14" / rel).read_bytes(), rel


def test_real_fixtures_keep_their_licence_and_source_note() -> None:
    for version, licence in (("2.10", "Apache License"), ("2.14", "MIT License")):
        assert licence in (LUSTRE / version / "LICENSE").read_text()
        assert "copied unchanged" in (LUSTRE / version / "SOURCE.md").read_text().lower()


def test_210_files_are_unchanged_copies_where_the_shared_capture_is_present() -> None:
    shared = REAL / "lustre-2.10-client" / "proc" / "fs" / "lustre"
    ours = LUSTRE / "2.10" / "proc" / "fs" / "lustre"
    files = [p.relative_to(ours) for p in ours.rglob("*") if p.is_file()]
    assert len(files) > 40
    if not shared.is_dir():  # the capture lives outside the repository; CI checks only our copy
        return
    mismatch = [str(f) for f in files if not filecmp.cmp(ours / f, shared / f, shallow=False)]
    assert mismatch == []


def test_made_up_trees_are_what_make_trees_writes(tmp_path: Path) -> None:
    """Regenerating into a copy changes nothing (the committed trees are not edited by hand)."""
    import importlib.util

    copy = tmp_path / "fixtures"
    (copy / "lustre").mkdir(parents=True)
    shutil.copy(LUSTRE / "make_trees.py", copy / "lustre" / "make_trees.py")
    spec = importlib.util.spec_from_file_location("make_trees_copy", copy / "lustre" / "make_trees.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main()
    for rel in (
        "lustre/2.12",
        "lustre/2.15",
        "p5/sys/fs/lustre",
        "p5/sys/kernel/debug/lustre",
        "p5/proc/mounts",
    ):
        generated = copy / rel
        paths = (
            [p.relative_to(generated) for p in generated.rglob("*") if p.is_file()]
            if generated.is_dir()
            else [Path()]
        )
        assert paths, rel
        for p in paths:
            assert (generated / p).read_bytes() == (FIXTURES / rel / p).read_bytes(), f"{rel}/{p}"
