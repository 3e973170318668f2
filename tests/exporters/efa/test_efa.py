"""The efa collector on the p5.48xlarge fixture trees, in process: names, labels, values, bad inputs."""

from __future__ import annotations

import os
import shutil
from collections import defaultdict
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetscope import contract
from fleetscope.exporters.base import NodeContext
from fleetscope.exporters.efa import EfaCollector, is_efa_device
from tests.exporters.conftest import P5, P5_EFA_DEVICES, P5_OLD_DRIVER
from tests.support.collected import samples as collected

SRD = (
    "retrans_bytes",
    "retrans_pkts",
    "retrans_timeout_events",
    "unresponsive_remote_events",
    "impaired_remote_conn_events",
)


def collector(root: Path, node: str = "node-a") -> EfaCollector:
    return EfaCollector(NodeContext(sysfs=root / "sys", node_name=node))


def samples(c: EfaCollector) -> dict[str, dict[tuple[str, str], float]]:
    """sample name -> {(device, port): value}; also checks every sample's label set."""
    out: dict[str, dict[tuple[str, str], float]] = defaultdict(dict)
    for (name, pairs), value in collected(c.collect()).items():
        labels = dict(pairs)
        assert set(labels) == {contract.NODE_LABEL, "device", "port"}, labels
        assert labels[contract.NODE_LABEL] == c.ctx.node_name
        out[name][(labels["device"], labels["port"])] = value
    return out


def counter_path(root: Path, device: str, counter: str, port: str = "1") -> Path:
    base = root / "sys" / "class" / "infiniband" / device
    return (base / "ports" / port if port else base) / "hw_counters" / counter


def test_p5_every_contract_counter_of_every_efa_device() -> None:
    c = collector(P5)
    got = samples(c)
    assert len(P5_EFA_DEVICES) == 32
    for counter in contract.EFA_PORT_COUNTERS:
        series = got[contract.efa_metric_name(counter)]
        assert sorted(series) == sorted((d, "1") for d in P5_EFA_DEVICES), counter
        assert contract.efa_metric_name(counter) in contract.METRICS
    for counter in contract.EFA_DEVICE_COUNTERS:
        assert sorted(got[contract.efa_metric_name(counter)]) == sorted((d, "") for d in P5_EFA_DEVICES)
    # Values are the files' numbers, exactly.
    raw = int(counter_path(P5, "rdmap113s0", "tx_bytes").read_text())
    assert got["efa_tx_bytes_total"][("rdmap113s0", "1")] == raw
    assert got["efa_keep_alive_rcvd_total"][("rdmap79s0", "")] == int(
        counter_path(P5, "rdmap79s0", "keep_alive_rcvd", port="").read_text()
    )
    # lifespan: a gauge in seconds (12 ms), at both levels; never a counter.
    assert got[contract.EFA_LIFESPAN][("rdmap201s0", "")] == 0.012
    assert got[contract.EFA_LIFESPAN][("rdmap201s0", "1")] == 0.012
    assert "efa_lifespan_total" not in got
    assert c.error_counts() == {}


def test_p5_non_efa_rdma_device_ignored() -> None:
    assert (P5 / "sys/class/infiniband/mlx5_0/ports/1/hw_counters/out_of_sequence").is_file()
    got = samples(collector(P5))
    devices = {dev for series in got.values() for dev, _ in series}
    assert devices == set(P5_EFA_DEVICES)
    assert not any("out_of_sequence" in name for name in got)


def test_families_have_contract_types_and_help() -> None:
    families = {f.name: f for f in collector(P5).collect()}
    assert families["efa_tx_bytes"].type == "counter"
    assert families["efa_tx_bytes"].documentation == contract.EFA_TX_BYTES.help
    assert families[contract.EFA_LIFESPAN].type == "gauge"


def test_old_driver_lacks_srd_counters_and_they_are_absent_not_zero() -> None:
    got = samples(collector(P5_OLD_DRIVER))
    for counter in SRD:
        assert contract.efa_metric_name(counter) not in got
    assert len(got["efa_tx_pkts_total"]) == 32
    assert len(got["efa_rdma_write_bytes_total"]) == 32


def test_counter_unknown_to_the_contract_is_exported_verbatim(p5_copy: Path) -> None:
    counter_path(p5_copy, "rdmap80s0", "future_counter_x").write_text("42\n")
    counter_path(p5_copy, "rdmap80s0", "alloc_mr_err", port="").write_text("3\n")
    got = samples(collector(p5_copy))
    assert got["efa_future_counter_x_total"] == {("rdmap80s0", "1"): 42}
    assert got["efa_alloc_mr_err_total"] == {("rdmap80s0", ""): 3}


def test_node_label_name_and_value_come_from_the_context() -> None:
    c = EfaCollector(NodeContext(sysfs=P5 / "sys", node_label="node", node_name="ip-10-1-2-3"))
    family = next(iter(c.collect()))
    assert family.samples[0].labels["node"] == "ip-10-1-2-3"
    assert contract.NODE_LABEL not in family.samples[0].labels


def test_bad_files_are_skipped_counted_and_never_fatal(p5_copy: Path) -> None:
    counter_path(p5_copy, "rdmap79s0", "tx_bytes").write_text("N/A (no PMA)\n")  # unparsable
    counter_path(p5_copy, "rdmap79s0", "rx_bytes").write_text("")  # truncated to nothing
    rx_pkts = counter_path(p5_copy, "rdmap79s0", "rx_pkts")
    rx_pkts.unlink()
    rx_pkts.mkdir()  # a directory where a file belongs: unreadable even for root
    send_wrs = counter_path(p5_copy, "rdmap79s0", "send_wrs")
    send_wrs.unlink()
    os.mkfifo(send_wrs)  # a FIFO: must not block the scrape
    recv_wrs = counter_path(p5_copy, "rdmap79s0", "recv_wrs")
    recv_wrs.unlink()
    recv_wrs.symlink_to("/nonexistent/recv_wrs")  # dangling link: ENOENT
    rdma_read = counter_path(p5_copy, "rdmap79s0", "rdma_read_bytes")
    rdma_read.unlink()
    rdma_read.symlink_to("/dev/zero")  # endless: refused, never read
    counter_path(p5_copy, "rdmap79s0", "rx_drops").write_text("9" * 400 + "\n")  # beyond u64
    counter_path(p5_copy, "rdmap79s0", "tx_pkts").write_text("nan\n")  # float() takes it; no kernel prints it
    c = collector(p5_copy)
    got = samples(c)
    for name in (
        "tx_bytes",
        "rx_bytes",
        "rx_pkts",
        "send_wrs",
        "recv_wrs",
        "rdma_read_bytes",
        "rx_drops",
        "tx_pkts",
    ):
        series = got[contract.efa_metric_name(name)]
        assert ("rdmap79s0", "1") not in series, name
        assert len(series) == 31, name  # the other devices are unaffected
    assert got["efa_recv_bytes_total"][("rdmap79s0", "1")] > 0  # its good files are still read
    assert c.error_counts() == {"unparsable": 2, "unreadable": 1, "not_regular_file": 3, "out_of_range": 2}
    samples(c)  # skipped again on every scrape, counted again
    assert c.error_counts() == {"unparsable": 4, "unreadable": 2, "not_regular_file": 6, "out_of_range": 4}


@pytest.mark.parametrize("text", ["1_000_000", "1.5e3", "+5", " 0x10", "١٢", "1e400"])
def test_a_counter_that_is_no_decimal_u64_is_refused(p5_copy: Path, text: str) -> None:
    """The driver prints a u64 in ASCII decimal; int() and float() take far more (issue 26, item 17)."""
    counter_path(p5_copy, "rdmap79s0", "tx_bytes").write_text(text + "\n")
    c = collector(p5_copy)
    assert ("rdmap79s0", "1") not in samples(c)[contract.efa_metric_name("tx_bytes")]
    assert c.error_counts() == {"unparsable": 1}
    c.close()


@pytest.mark.slow
@given(st.text(max_size=24))
@settings(
    max_examples=200,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
def test_any_counter_text_is_read_only_when_it_is_a_decimal_u64(p5_copy: Path, text: str) -> None:
    counter_path(p5_copy, "rdmap79s0", "tx_bytes").write_text(text, errors="surrogateescape")
    c = collector(p5_copy)
    try:
        got = samples(c)[contract.efa_metric_name("tx_bytes")].get(("rdmap79s0", "1"))
    finally:
        c.close()  # its cached descriptors
    stripped = text.strip()
    if got is not None:
        assert stripped.isascii() and stripped.isdigit() and got == int(stripped) <= 2**64 - 1


def test_no_infiniband_class_means_no_series_and_no_error(tmp_path: Path) -> None:
    (tmp_path / "sys").mkdir()
    c = collector(tmp_path)
    assert list(c.collect()) == []
    assert c.error_counts() == {}


def test_missing_sysfs_root_yields_nothing(tmp_path: Path) -> None:
    c = collector(tmp_path / "does-not-exist")
    assert list(c.collect()) == []


def test_values_are_fresh_on_every_scrape(p5_copy: Path) -> None:
    c = collector(p5_copy)
    path = counter_path(p5_copy, "rdmap82s0", "retrans_timeout_events")
    before = samples(c)["efa_retrans_timeout_events_total"][("rdmap82s0", "1")]
    path.write_text(f"{int(before) + 7}\n")  # in place, as the kernel's file changes
    assert samples(c)["efa_retrans_timeout_events_total"][("rdmap82s0", "1")] == before + 7


def test_values_are_fresh_without_cached_descriptors(p5_copy: Path) -> None:
    c = collector(p5_copy)
    c._fd_budget = 0  # as with a tiny open-file limit: every read opens the file
    path = counter_path(p5_copy, "rdmap82s0", "tx_pkts")
    samples(c)
    path.write_text("5\n")
    assert samples(c)["efa_tx_pkts_total"][("rdmap82s0", "1")] == 5
    assert c._fds == {}


def test_hot_plug_add_and_remove_devices(p5_copy: Path) -> None:
    ib = p5_copy / "sys" / "class" / "infiniband"
    c = collector(p5_copy)
    assert len(samples(c)["efa_tx_bytes_total"]) == 32
    shutil.copytree(ib / "rdmap79s0", ib / "rdmap250s0", symlinks=True)
    shutil.rmtree(ib / "rdmap201s0")
    got = samples(c)["efa_tx_bytes_total"]
    assert ("rdmap250s0", "1") in got
    assert ("rdmap201s0", "1") not in got
    assert len(got) == 32
    assert c.error_counts() == {}
    c.close()
    assert c._fds == {}


def test_vanished_file_is_counted_then_relisted(p5_copy: Path, monkeypatch) -> None:
    import fleetscope.exporters.efa as efa

    c = collector(p5_copy)
    c._fd_budget = 0
    samples(c)
    counter_path(p5_copy, "rdmap96s0", "rx_drops").unlink()
    got = samples(c)
    assert ("rdmap96s0", "1") not in got["efa_rx_drops_total"]
    assert c.error_counts() == {"unreadable": 1}
    monkeypatch.setattr(efa, "STALE_RELIST_SECONDS", 0.0)
    samples(c)  # relisted: the file is no longer expected, so no new error
    samples(c)
    assert c.error_counts() == {"unreadable": 1}


def test_device_detection(tmp_path: Path) -> None:
    ib = tmp_path / "sys" / "class" / "infiniband"
    by_driver = ib / "weirdname0" / "device"
    by_driver.mkdir(parents=True)
    (by_driver / "driver").symlink_to("../../../bus/pci/drivers/efa")
    by_vendor = ib / "other1" / "device"
    by_vendor.mkdir(parents=True)
    (by_vendor / "vendor").write_text("0x1d0f\n")
    not_efa_named_like_one = ib / "rdmap5s0" / "device"
    not_efa_named_like_one.mkdir(parents=True)
    (not_efa_named_like_one / "driver").symlink_to("../../../bus/pci/drivers/mlx5_core")
    (ib / "efa_0").mkdir()  # no PCI information at all: decided by name
    (ib / "mlx5_1").mkdir()
    assert is_efa_device(str(ib / "weirdname0"), "weirdname0")
    assert is_efa_device(str(ib / "other1"), "other1")
    assert not is_efa_device(str(ib / "rdmap5s0"), "rdmap5s0")
    assert is_efa_device(str(ib / "efa_0"), "efa_0")
    assert not is_efa_device(str(ib / "mlx5_1"), "mlx5_1")


def _snapshot(root: Path) -> dict[str, str]:
    out = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_symlink():
            out[rel] = "-> " + os.readlink(p)
        elif p.is_file():
            out[rel] = p.read_text()
    return out


def test_committed_trees_are_what_the_generator_writes(tmp_path: Path) -> None:
    """tests/fixtures/make_p5_tree.py is the source: the committed EFA trees must match it."""
    from tests.fixtures import make_p5_tree

    for folder, how in make_p5_tree.TREES.items():
        ib = Path("sys") / "class" / "infiniband"
        make_p5_tree.write_tree(tmp_path / folder, **how)
        assert _snapshot(tmp_path / folder / ib) == _snapshot(P5.parent / folder / ib), f"regenerate {folder}"
