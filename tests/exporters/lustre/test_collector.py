"""The lustre collector on the four Lustre layouts, the p5 node tree, and broken inputs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fleetscope import contract
from fleetscope.exporters.lustre import LustreCollector
from fleetscope.exporters.registry import NodeCollector
from tests.exporters.lustre.helpers import FIXTURES, LUSTRE, NODE, context, series
from tests.support.collected import samples

READ = contract.LUSTRE_CLIENT_READ_BYTES
WRITE = contract.LUSTRE_CLIENT_WRITE_BYTES
OPS = contract.LUSTRE_CLIENT_OPERATIONS
SECS = contract.LUSTRE_CLIENT_OPERATION_SECONDS
HEALTHY = contract.LUSTRE_CLIENT_HEALTHY


def file_counters(path: Path) -> dict[str, tuple[int, str, list[int]]]:
    """An independent reading of a stats file (split on whitespace): name -> (samples, unit, numbers)."""
    out = {}
    for line in path.read_text().splitlines():
        tokens = line.split()
        if "samples" not in tokens:
            continue
        i = tokens.index("samples")
        out[" ".join(tokens[: i - 1])] = (
            int(tokens[i - 1]),
            tokens[i + 1].strip("[]"),
            [int(t) for t in tokens[i + 2 :]],
        )
    return out


def scrape(root: Path) -> tuple[LustreCollector, dict]:
    collector = LustreCollector(context(root))
    return collector, samples(collector.collect())


def expect_matches_file(found: dict, stats_file: Path, fs: str, mount: str) -> None:
    """Every counter of the file shows up with the file's value, under the given labels."""
    labels = {"Hostname": NODE, "fs": fs, "mount": mount}
    real = file_counters(stats_file)
    ops = series(found, OPS, **labels)
    secs = series(found, SECS, **labels)
    assert series(found, READ, **labels) == {"": real["read_bytes"][2][2] if "read_bytes" in real else 0}
    assert series(found, WRITE, **labels) == {"": real["write_bytes"][2][2] if "write_bytes" in real else 0}
    for name, (count, unit, numbers) in real.items():
        if name in ("read_bytes", "write_bytes", "opencount", "openclosetime"):
            assert name not in ops and name not in secs
            continue
        assert ops[name] == count, name
        if unit in ("usec", "usecs"):
            assert secs[name] == pytest.approx(numbers[2] * 1e-6), name
        else:
            assert name not in secs
    for op in ("read", "write"):
        if op not in real:
            assert ops[op] == real.get(f"{op}_bytes", (0,))[0]
    for op in contract.LUSTRE_METADATA_OPERATIONS:
        assert ops[op] == real.get(op, (0,))[0]  # absent from the file = 0


def test_lustre_210_real_procfs_tree() -> None:
    root = LUSTRE / "2.10"
    collector, found = scrape(root)
    inst = "lustrefs-ffff88105db50000"
    expect_matches_file(found, root / "proc/fs/lustre/llite" / inst / "stats", "lustrefs", inst)
    assert series(found, OPS, mount=inst)["read"] == 1  # counted as samples of read_bytes on 2.10
    assert series(found, SECS) == {}  # 2.10 llite stats carry no times
    assert series(found, HEALTHY) == {}  # no health_check in the capture
    assert collector.error_counts() == {}


def test_lustre_212_debugfs_layout_fsx_mount() -> None:
    root = LUSTRE / "2.12"
    collector, found = scrape(root)
    inst = "fsx-ffff8f3e1a2b4000"
    expect_matches_file(found, root / "sys/kernel/debug/lustre/llite" / inst / "stats", "fsx", "/fsx")
    assert series(found, SECS) == {}
    assert series(found, HEALTHY) == {"": 1.0}
    assert collector.error_counts() == {}


def test_lustre_214_real_dump_usecs_become_seconds() -> None:
    root = LUSTRE / "2.14"
    collector, found = scrape(root)
    inst = "ai400x2-ff47bce9ca35d800"
    expect_matches_file(found, root / "sys/kernel/debug/lustre/llite" / inst / "stats", "ai400x2", inst)
    secs = series(found, SECS, fs="ai400x2")
    assert secs["getattr"] == pytest.approx(2317024138e-6)
    assert secs["mkdir"] == pytest.approx(23731812831e-6)
    assert secs["rename"] == 0  # timed version, no rename yet
    assert "openclosetime" not in secs and "ioctl" not in secs
    assert series(found, HEALTHY) == {"": 1.0}
    assert collector.error_counts() == {}


def test_lustre_215_two_fsx_mounts_and_a_bind_mount() -> None:
    root = LUSTRE / "2.15"
    collector, found = scrape(root)
    debug = root / "sys/kernel/debug/lustre/llite"
    expect_matches_file(found, debug / "yd4tjbmv-ffff9b8c4a3f5000" / "stats", "yd4tjbmv", "/fsx")
    expect_matches_file(found, debug / "ab12cdef-ffff9b8c51e6c800" / "stats", "ab12cdef", "/scratch")
    mounts = {dict(k)["mount"] for (n, k) in found if n == READ}
    assert mounts == {"/fsx", "/scratch"}  # the pod's bind mount of /fsx is the same superblock
    assert series(found, SECS, mount="/fsx")["read"] == pytest.approx(1048576 * 1850.5e-6)
    assert series(found, HEALTHY) == {"": 1.0}
    assert collector.error_counts() == {}


def test_p5_node_tree() -> None:
    root = FIXTURES / "p5"
    collector, found = scrape(root)
    stats = root / "sys/kernel/debug/lustre/llite/s4xbwbmv-ffff9e41c8d2b800/stats"
    expect_matches_file(found, stats, "s4xbwbmv", "/fsx")
    assert series(found, READ) == {"": 4398046511104}
    assert collector.error_counts() == {}


def copy_tree(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    return dst


def test_health_check_unhealthy(tmp_path: Path) -> None:
    root = copy_tree(LUSTRE / "2.15", tmp_path / "t")
    (root / "sys/fs/lustre/health_check").write_text(
        "device yd4tjbmv-OST0002-osc-ffff9b8c4a3f5000 reported unhealthy\nNOT HEALTHY\n"
    )
    _, found = scrape(root)
    assert series(found, HEALTHY) == {"": 0.0}
    assert series(found, READ, mount="/fsx")  # stats still served


def test_no_lustre_on_this_node_is_nothing_and_success(tmp_path: Path) -> None:
    for d in ("sys/class", "proc", "sys/kernel/debug"):
        (tmp_path / d).mkdir(parents=True)
    (tmp_path / "proc/mounts").write_text("proc /proc proc rw 0 0\n")
    collector = LustreCollector(context(tmp_path))
    assert list(collector.collect()) == []
    node = NodeCollector([collector])
    found = samples(node.collect())
    assert found[(contract.COLLECTOR_SUCCESS, (("collector", "lustre"),))] == 1.0
    assert not any(name.startswith("lustre_") for name, _ in found)


def test_debugfs_not_readable_keeps_health_and_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = copy_tree(LUSTRE / "2.15", tmp_path / "t")
    shutil.rmtree(root / "sys/kernel/debug")  # what a non-root exporter (or no debugfs) sees
    collector, found = scrape(root)
    assert series(found, HEALTHY) == {"": 1.0}
    assert series(found, READ) == {}
    assert collector.error_counts() == {"stats_missing": 2}
    assert "debugfs" in caplog.text and "root" in caplog.text


def test_unreadable_stats_file_is_skipped_other_mount_kept(tmp_path: Path) -> None:
    root = copy_tree(LUSTRE / "2.15", tmp_path / "t")
    stats = root / "sys/kernel/debug/lustre/llite/ab12cdef-ffff9b8c51e6c800/stats"
    stats.unlink()
    stats.mkdir()  # reading it fails with EISDIR, as an unreadable file would (tests may run as root)
    collector = LustreCollector(context(root))
    node = NodeCollector([collector])
    found = samples(node.collect())
    assert set(series(found, READ, mount="/fsx")) == {""}
    assert series(found, READ, mount="/scratch") == {}
    assert collector.error_counts() == {"not_regular_file": 1}
    assert found[(contract.COLLECTOR_SUCCESS, (("collector", "lustre"),))] == 1.0


def test_truncated_stats_keeps_complete_lines_and_invents_no_zeros(tmp_path: Path) -> None:
    root = copy_tree(LUSTRE / "2.12", tmp_path / "t")
    stats = root / "sys/kernel/debug/lustre/llite/fsx-ffff8f3e1a2b4000/stats"
    text = stats.read_text()
    stats.write_text(text[: text.index("write_bytes") + 30])  # cut inside the write_bytes line
    collector, found = scrape(root)
    assert collector.error_counts() == {"stats_truncated": 1}
    assert series(found, READ) == {"": 171802754854}
    assert series(found, WRITE) == {}  # lost with the cut line: no false 0 (which would be a reset)
    assert series(found, OPS) == {"read": 52411}  # nothing zero-filled from a partial file


def test_malformed_line_is_skipped_good_lines_kept(tmp_path: Path) -> None:
    root = copy_tree(LUSTRE / "2.12", tmp_path / "t")
    stats = root / "sys/kernel/debug/lustre/llite/fsx-ffff8f3e1a2b4000/stats"
    stats.write_text(
        stats.read_text().replace("getattr                   8812 samples", "getattr  8812 sample")
    )
    collector, found = scrape(root)
    assert collector.error_counts() == {"stats_malformed": 1}
    ops = series(found, OPS)
    assert "getattr" not in ops
    assert ops["open"] == 1204 and ops["inode_permission"] == 17640


def write_mountinfo(root: Path, lines: list[str]) -> None:
    (root / "proc" / "1").mkdir(parents=True, exist_ok=True)
    (root / "proc" / "1" / "mountinfo").write_text("".join(line + "\n" for line in lines))


def test_mountinfo_is_preferred_and_bind_mounts_resolve_to_the_root_mount(tmp_path: Path) -> None:
    root = copy_tree(LUSTRE / "2.15", tmp_path / "t")
    write_mountinfo(
        root,
        [
            "22 1 259:1 / / rw,noatime shared:1 - xfs /dev/nvme0n1p1 rw",
            # a bind of a subdirectory listed first, then the file system's own mount (same 0:52)
            "801 30 0:52 /datasets /mnt/data rw,relatime shared:400 - lustre 172.31.40.12@tcp:/yd4tjbmv "
            "rw,flock",
            "790 22 0:52 / /fsx\\040mount rw,relatime shared:400 - lustre 172.31.40.12@tcp:/yd4tjbmv "
            "rw,flock",
            "795 22 0:61 / /scratch rw,relatime shared:410 - lustre 172.31.33.190@tcp:/ab12cdef rw,flock",
        ],
    )
    _, found = scrape(root)
    assert {dict(k)["mount"] for (n, k) in found if n == READ} == {"/fsx mount", "/scratch"}


def test_same_fs_mounted_twice_falls_back_to_instance_names(tmp_path: Path) -> None:
    root = copy_tree(LUSTRE / "2.15", tmp_path / "t")
    debug = root / "sys/kernel/debug/lustre/llite"
    shutil.copytree(debug / "yd4tjbmv-ffff9b8c4a3f5000", debug / "yd4tjbmv-ffff9b8c60001000")
    write_mountinfo(
        root,
        [
            "790 22 0:52 / /fsx rw - lustre 172.31.40.12@tcp:/yd4tjbmv rw",
            "791 22 0:53 / /fsx-again rw - lustre 172.31.40.12@tcp:/yd4tjbmv rw",
            "795 22 0:61 / /scratch rw - lustre 172.31.33.190@tcp:/ab12cdef rw",
        ],
    )
    _, found = scrape(root)
    assert {dict(k)["mount"] for (n, k) in found if n == READ} == {
        "yd4tjbmv-ffff9b8c4a3f5000",
        "yd4tjbmv-ffff9b8c60001000",
        "/scratch",
    }


def test_new_mount_is_picked_up_on_the_next_scrape(tmp_path: Path) -> None:
    root = copy_tree(LUSTRE / "2.12", tmp_path / "t")
    collector = LustreCollector(context(root))
    assert {dict(k)["mount"] for (n, k) in samples(collector.collect()) if n == READ} == {"/fsx"}
    new = "scr2-ffff8f3e77770000"
    shutil.copytree(
        root / "sys/kernel/debug/lustre/llite/fsx-ffff8f3e1a2b4000",
        root / "sys/kernel/debug/lustre/llite" / new,
    )
    mounts = root / "proc/mounts"
    mounts.write_text(mounts.read_text() + "172.31.5.5@tcp:/scr2 /scratch2 lustre rw,flock 0 0\n")
    assert {dict(k)["mount"] for (n, k) in samples(collector.collect()) if n == READ} == {"/fsx", "/scratch2"}


def test_node_without_lustre_never_reports_an_unreadable_debugfs(tmp_path: Path) -> None:
    (tmp_path / "sys/kernel/debug").mkdir(parents=True)
    (tmp_path / "proc").mkdir()
    # a listing that fails (ELOOP here; EACCES for a non-root exporter on a real node)
    (tmp_path / "sys/kernel/debug/lustre").symlink_to("lustre")
    collector, found = scrape(tmp_path)
    assert found == {} and collector.error_counts() == {}


def test_lustre_node_with_unreadable_debugfs_reports_it(tmp_path: Path) -> None:
    root = copy_tree(LUSTRE / "2.12", tmp_path / "t")
    shutil.rmtree(root / "sys/kernel/debug/lustre")
    (root / "sys/kernel/debug/lustre").symlink_to("lustre")
    collector, found = scrape(root)
    assert series(found, HEALTHY) == {"": 1.0}
    assert collector.error_counts() == {"unreadable": 1, "stats_missing": 1}
