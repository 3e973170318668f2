"""The systemd units: ``systemd-analyze verify`` accepts them, and the command lines they run
(with the example environment file expanded as systemd would) are accepted by fleetscope's own
argument parser, so a renamed flag breaks this test instead of a node."""

from __future__ import annotations

import configparser
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from fleetscope.cli import build_parser
from tests.deploy.conftest import ROOT, VENV_BIN

UNITS = ROOT / "deploy" / "systemd"
ENV_EXAMPLE = UNITS / "fleetscope.env.example"
INSTALLED = "/opt/fleetscope/venv/bin/fleetscope"


def read_unit(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",))
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(path.read_text().replace("\\\n", " "))
    return parser


def env_file(path: Path) -> dict[str, str]:
    env = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            env[key] = value
    return env


def expand(exec_start: str, env: dict[str, str]) -> list[str]:
    """systemd's rules: ``${VAR}`` is one word, ``$VAR`` is split on whitespace."""
    words: list[str] = []
    for word in shlex.split(exec_start):
        if word.startswith("$") and not word.startswith("${"):
            words.extend(env.get(word[1:], "").split())
            continue
        for key, value in env.items():
            word = word.replace("${" + key + "}", value)
        words.append(word)
    return words


@pytest.mark.parametrize("unit", ["fleetscope-exporter.service", "fleetscope-service.service"])
def test_systemd_analyze_verify(unit: str, tmp_path: Path) -> None:
    if not shutil.which("systemd-analyze"):
        pytest.fail("systemd-analyze not installed (apt-get install systemd)")
    text = (UNITS / unit).read_text().replace(INSTALLED, str(VENV_BIN / "fleetscope"))
    (tmp_path / unit).write_text(text)
    res = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(tmp_path / unit)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # Only complaints about this unit count (the host's own units may be incomplete in a container).
    ours = [line for line in (res.stdout + res.stderr).splitlines() if unit in line]
    assert not ours, "\n".join(ours)


@pytest.mark.parametrize(
    ("unit", "subcommand"),
    [("fleetscope-exporter.service", "exporter"), ("fleetscope-service.service", "serve")],
)
def test_exec_start_flags_exist(unit: str, subcommand: str) -> None:
    service = read_unit(UNITS / unit)["Service"]
    argv = expand(service["ExecStart"], env_file(ENV_EXAMPLE))
    assert argv[0] == INSTALLED and argv[1] == subcommand
    args = build_parser(argv[1:]).parse_args(argv[1:])
    assert args.command == subcommand
    assert service["EnvironmentFile"] == "-/etc/default/fleetscope"
    assert service["Restart"] in ("always", "on-failure")


def test_exporter_unit_creates_the_shared_directories() -> None:
    service = read_unit(UNITS / "fleetscope-exporter.service")["Service"]
    env = env_file(ENV_EXAMPLE)
    runtime = {"/run/" + d for d in service["RuntimeDirectory"].split()}
    assert env["FLEETSCOPE_TRAINING_DIR"] in runtime
    assert env["FLEETSCOPE_HPC_JOB_MAPPING_DIR"] in runtime
    # the exporter needs /dev/kmsg, so the kernel log must not be hidden from it
    assert service.get("ProtectKernelLogs", "no") == "no"
