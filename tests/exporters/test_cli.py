"""``fleetscope exporter`` as a real process: --once, bad flags and files, a port in use, a light import."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from fleetscope import contract
from tests.conftest import ROOT
from tests.exporters.conftest import P5, tree_flags
from tests.support.exposition import matching, value
from tests.support.prom import free_port, promtool

pytestmark = [pytest.mark.server]

ONLY_EFA_LUSTRE = ["--collector.disable-defaults", "--collector.efa", "--collector.lustre"]


def exporter(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fleetscope", "exporter", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        check=False,
    )


def assert_one_line_error(res: subprocess.CompletedProcess, *fragments: str) -> None:
    assert res.returncode != 0, res
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("fleetscope: error: "), res.stderr
    assert "Traceback" not in res.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_once_prints_one_scrape_that_promtool_accepts() -> None:
    res = exporter("--once", "--node.name=p5-node", *tree_flags(P5), *ONLY_EFA_LUSTRE)
    assert res.returncode == 0, res.stderr
    tx = matching(res.stdout, contract.EFA_TX_BYTES)
    assert len(tx) == 32
    assert all(labels["Hostname"] == "p5-node" for _name, labels, _v in tx)
    assert value(res.stdout, contract.COLLECTOR_SUCCESS, collector="efa") == 1
    check = promtool("check", "metrics", input=res.stdout.encode())
    assert check.returncode == 0, check.stdout + check.stderr


def test_node_label_name_flag() -> None:
    res = exporter("--once", "--node.label-name=node", "--node.name=n7", *tree_flags(P5), *ONLY_EFA_LUSTRE)
    assert res.returncode == 0, res.stderr
    assert f'{contract.EFA_RX_DROPS}{{device="rdmap79s0",node="n7",port="1"}}' in res.stdout


def test_no_collector_flag_disables_one() -> None:
    res = exporter(
        "--once", *tree_flags(P5), "--no-collector.gpu", "--no-collector.xid", "--no-collector.efa"
    )
    assert res.returncode == 0, res.stderr
    assert "efa_" not in res.stdout
    assert 'collector="efa"' not in res.stdout


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["--path.sysfs=/nonexistent/sys"], ["--path.sysfs /nonexistent/sys", "no such directory"]),
        (["--path.procfs=/nonexistent/proc"], ["--path.procfs"]),
        (["--node.label-name=bad-label"], ["invalid --node.label-name"]),
        (["--web.listen-address=nohostport"], ["invalid --web.listen-address"]),
    ],
)
def test_bad_flags_are_one_clear_error(args: list[str], fragments: list[str]) -> None:
    assert_one_line_error(exporter(*args, *ONLY_EFA_LUSTRE), *fragments)


def test_web_config_with_unknown_keys_is_one_clear_error(tmp_path: Path) -> None:
    cfg = tmp_path / "web.yml"
    cfg.write_text("basic_auth_users: {}\ntls_config:\n  cert_file: x\n")
    res = exporter(f"--web.config.file={cfg}", *tree_flags(P5), *ONLY_EFA_LUSTRE)
    assert_one_line_error(res, "unknown key(s) ['tls_config']", str(cfg))


def test_tls_certificate_that_cannot_be_loaded_is_one_clear_error(tmp_path: Path) -> None:
    cfg = tmp_path / "web.yml"
    cfg.write_text("tls_server_config:\n  cert_file: missing.crt\n  key_file: missing.key\n")
    res = exporter(
        f"--web.config.file={cfg}", f"--web.listen-address=127.0.0.1:{free_port()}", *ONLY_EFA_LUSTRE
    )
    assert_one_line_error(res, "cannot load TLS certificate or key")


def test_port_in_use_is_one_clear_error() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        res = exporter(f"--web.listen-address=127.0.0.1:{port}", *tree_flags(P5), *ONLY_EFA_LUSTRE)
    assert_one_line_error(res, f"cannot listen on 127.0.0.1:{port}: address already in use")


HEAVY = ("pandas", "numpy", "fastapi", "grafanalib", "matplotlib", "torch", "isal")


def test_the_node_agent_imports_nothing_heavy() -> None:
    """Every exporter module, the CLI's flag setup (which imports every collector) and a scrape."""
    code = f"""
import sys, io, contextlib
import fleetscope.exporters.cli, fleetscope.exporters.efa, fleetscope.exporters.server
import fleetscope.exporters.webconfig, fleetscope.exporters.registry, fleetscope.exporters.base
from fleetscope.cli import main
with contextlib.redirect_stdout(io.StringIO()) as out:
    rc = main(["exporter", "--once", *{tree_flags(P5)!r}])
assert rc == 0 and "efa_tx_bytes_total" in out.getvalue(), rc
heavy = [m for m in {HEAVY!r} if m in sys.modules]
assert not heavy, heavy
print("light")
"""
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT, check=False
    )
    assert res.returncode == 0 and res.stdout.strip() == "light", res.stderr[-2000:]
