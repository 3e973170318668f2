"""XID errors from the kernel log (file, FIFO) and from NVML events."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from fleetscope import contract as c
from fleetscope.exporters.gpu.collector import GpuCollector
from fleetscope.exporters.gpu.xid import XidCollector, XidTally, _Gpu, parse_kmsg_line
from fleetscope.xids import describe, message
from tests.exporters.gpu.conftest import NVML_FIXTURES, context, fixture_with_script, one, values
from tests.support.collected import samples
from tests.support.exporter import ExporterProcess
from tests.support.exposition import matching, value
from tests.support.prom import wait_for

KMSG = NVML_FIXTURES / "kmsg-xid79.txt"


def test_parse_kmsg_and_dmesg_lines() -> None:
    assert parse_kmsg_line("4,1203,88124000123,-;NVRM: Xid (PCI:0000:2a:00): 79, pid='<unknown>'") == (
        "0000:2a:00",
        79,
    )
    assert parse_kmsg_line("[ 1234.5] NVRM: Xid (PCI:0000:9a:00): 13, pid=4242, name=python") == (
        "0000:9a:00",
        13,
    )
    assert parse_kmsg_line("NVRM: GPU 0000:2a:00.0: GPU has fallen off the bus.") is None


def test_catalog_classes() -> None:
    assert describe(79).drain and describe(79).message == "GPU has fallen off the bus"
    assert describe(13).klass == "application" and describe(63).klass == "watch"
    assert message(999).startswith("XID 999")


@pytest.mark.server
def test_xid79_in_kmsg_fixture_through_the_exporter(tmp_path: Path) -> None:
    flags = [
        "--collector.disable-defaults",
        "--collector.gpu",
        "--collector.xid",
        f"--collector.gpu.nvml-replay={NVML_FIXTURES / 'h100x8.json'}",
        f"--collector.xid.kmsg-path={KMSG}",
    ]
    with ExporterProcess(*flags, log_dir=tmp_path) as exporter:
        body = wait_for(
            lambda: (b := exporter.metrics()) and len(matching(b, c.GPU_XID_ERRORS_TOTAL)) == 3 and b,
            timeout=15,
            what="three XIDs counted",
        )
        assert value(body, c.GPU_XID_ERRORS_TOTAL, xid="79", gpu="1", pci_bus_id="00000000:2A:00.0") == 1
        assert len(matching(body, c.GPU_XID_ERRORS_TOTAL, xid="79")) == 1
        assert (
            value(
                body, c.DCGM_FI_DEV_XID_ERRORS, gpu="1", err_code="79", err_msg="GPU has fallen off the bus"
            )
            == 79
        )
        assert matching(body, c.DCGM_FI_DEV_XID_ERRORS, gpu="4", err_code="13")
        # An XID on a PCI address no GPU of this node has: kept, with empty GPU labels.
        assert matching(body, c.DCGM_FI_DEV_XID_ERRORS, gpu="", pci_bus_id="0000:c1:00")
        # XID 79 takes the GPU out: gpu_up 0 and no other series for it; the other seven report.
        body = exporter.metrics()
        up = {labels["gpu"]: v == 1 for _name, labels, v in matching(body, c.GPU_UP)}
        assert up == {str(i): i != 1 for i in range(8)}
        assert not matching(body, c.DCGM_FI_DEV_SM_CLOCK, gpu="1")
        assert "GPU 1 has fallen off the bus (XID 79)" in exporter.log()


def test_kmsg_fifo_and_nvml_event_are_deduplicated(tmp_path: Path) -> None:
    fifo = tmp_path / "kmsg"
    os.mkfifo(fifo)
    fixture = fixture_with_script(tmp_path, "h100x8.json", [{"from_scrape": 1, "device": 4, "xid": 48}])
    ctx = context(gpu_nvml_replay=str(fixture), xid_kmsg_path=str(fifo))
    gpu, xid = GpuCollector(ctx), XidCollector(ctx)
    try:
        list(gpu.collect())  # scrape 1: the replayed NVML event for GPU 4 becomes due
        wait_for(lambda: samples(xid.collect()), timeout=10, what="NVML XID event")
        s = samples(xid.collect())
        assert one(s, c.GPU_XID_ERRORS_TOTAL, gpu="4", xid="48") == 1
        # The same XID from the kernel log a moment later is the same error: not counted twice.
        writer = threading.Thread(
            target=lambda: fifo.write_text(
                "4,9,9,-;NVRM: Xid (PCI:0000:9a:00): 48, pid=1, DBE\n"
                "4,10,10,-;NVRM: Xid (PCI:0000:9a:00): 94, pid=1, contained\n"
            )
        )
        writer.start()
        writer.join(timeout=10)
        wait_for(lambda: values(samples(xid.collect()), c.GPU_XID_ERRORS_TOTAL, xid="94"), timeout=10)
        s = samples(xid.collect())
        assert one(s, c.GPU_XID_ERRORS_TOTAL, gpu="4", xid="48") == 1
        assert one(s, c.GPU_XID_ERRORS_TOTAL, gpu="4", xid="94") == 1
        assert one(s, c.DCGM_FI_DEV_XID_ERRORS, gpu="4") == 94  # the last one
    finally:
        xid.close()
        gpu.close()


def test_tally_counts_repeats_from_one_source() -> None:
    tally = XidTally()
    g = _Gpu("gpu:0", ("0", "u", "b", "nvidia0", "m"))
    assert tally.record(g, 13, "kmsg", now=0.0)
    assert tally.record(g, 13, "kmsg", now=1.0)  # a repeat from the same source is a new error
    assert not tally.record(g, 13, "nvml", now=2.0)  # the other source's copy
    assert tally.record(g, 13, "nvml", now=20.0)  # too late to be a copy
    counts, last, _ = tally.snapshot()
    assert counts[("gpu:0", 13)] == 3 and last["gpu:0"] == 13
