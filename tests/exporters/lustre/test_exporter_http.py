"""``fleetscope exporter`` as a real process on the p5 node tree, scraped over HTTP."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetscope import contract
from tests.exporters.lustre.helpers import FIXTURES
from tests.support.exporter import ExporterProcess
from tests.support.exposition import series
from tests.support.prom import promtool

pytestmark = [pytest.mark.server]

P5 = FIXTURES / "p5"


def test_exporter_serves_lustre_series_of_the_p5_tree(tmp_path: Path) -> None:
    flags = (
        "--no-collector.gpu",
        "--no-collector.xid",
        "--no-collector.efa",
        "--no-collector.training",
        f"--path.sysfs={P5 / 'sys'}",
        f"--path.procfs={P5 / 'proc'}",
        f"--path.debugfs={P5 / 'sys' / 'kernel' / 'debug'}",
        "--node.name=p5-node-7",
    )
    with ExporterProcess(*flags, log_dir=tmp_path) as exporter:
        text = exporter.metrics()
    found = series(text)
    labels = (("Hostname", "p5-node-7"), ("fs", "s4xbwbmv"), ("mount", "/fsx"))
    assert found[(contract.LUSTRE_CLIENT_READ_BYTES, labels)] == 4398046511104
    assert found[(contract.LUSTRE_CLIENT_WRITE_BYTES, labels)] == 549755813888
    assert (
        found[(contract.LUSTRE_CLIENT_OPERATIONS, (*labels[:2], ("mount", "/fsx"), ("operation", "open")))]
        == 4800
    )
    seconds = found[(contract.LUSTRE_CLIENT_OPERATION_SECONDS, (*labels, ("operation", "getattr")))]
    assert abs(seconds - 2.13) < 1e-9
    assert found[(contract.LUSTRE_CLIENT_HEALTHY, (("Hostname", "p5-node-7"),))] == 1
    assert found[(contract.COLLECTOR_SUCCESS, (("collector", "lustre"),))] == 1
    assert not any(name.startswith(("efa_", "DCGM_")) for name, _ in found)
    lint = promtool("check", "metrics", input=text.encode())
    assert lint.returncode == 0, lint.stdout.decode() + lint.stderr.decode()
