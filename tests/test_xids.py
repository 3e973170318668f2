"""fleetscope.xids: the one XID catalog, its classes and the rules and exporter built on it."""

from __future__ import annotations

from pathlib import Path

import yaml

from fleetscope import contract, xids

ROOT = Path(__file__).resolve().parents[1]

# The classes of NVIDIA's XID catalog (https://docs.nvidia.com/deploy/xid-errors/), grouped by
# resolution bucket: reset / reboot / repair the GPU, watch it, or blame the application.
DRAIN = {
    46,
    48,
    54,
    62,
    64,
    74,
    79,
    95,
    109,
    110,
    119,
    120,
    136,
    140,
    143,
    *range(144, 151),
    151,
    155,
    156,
    158,
}
WATCH = {63, 92, 94, 121, 154, 157}
APPLICATION = {8, 11, 13, 25, 31, 32, 43, 45, 69, 80, 137}


def test_classes_follow_nvidias_resolution_buckets() -> None:
    assert xids.XID_DRAIN == DRAIN
    assert xids.XID_WATCH == WATCH
    assert xids.XID_APPLICATION == APPLICATION
    assert not (DRAIN & WATCH or DRAIN & APPLICATION or WATCH & APPLICATION)
    assert {xids.xid_class(x) for x in DRAIN} == {"drain"}
    assert {xids.xid_class(x) for x in WATCH} == {"watch"}
    assert {xids.xid_class(x) for x in APPLICATION} == {"application"}
    assert xids.xid_class(61) == "other" and xids.xid_class(999) == "other"
    assert xids.codes("other") == {61, 68}


def test_every_entry_has_message_cause_and_action() -> None:
    for code, x in xids.CATALOG.items():
        assert x.code == code and x.klass in xids.XID_CLASSES
        for text in (x.message, x.cause, x.action):
            assert text.strip() == text and text and "\n" not in text
        # err_msg is a label value: no quotes or backslashes to escape, and short.
        assert '"' not in x.message and "\\" not in x.message and len(x.message) <= 64
        assert x.drain == (code in DRAIN)


def test_describe_known_and_unknown() -> None:
    lost = xids.describe(79)
    assert lost.drain and lost.klass == "drain" and lost.message == "GPU has fallen off the bus"
    assert "PCIe" in lost.cause and "power-cycle" in lost.action
    assert xids.describe(48).message == "Double Bit ECC Error"
    assert xids.describe(13).klass == "application" and not xids.describe(13).drain
    assert xids.describe(63).klass == "watch"
    unknown = xids.describe(999)
    assert unknown.klass == "other" and not unknown.drain
    assert unknown.message == "XID 999 (see NVIDIA XID catalog)" == xids.message(999)
    assert xids.CATALOG_URL in unknown.action
    assert xids.message(79) == "GPU has fallen off the bus"


def test_finding_cause() -> None:
    assert xids.finding_cause(79) == "gpu_lost"
    assert xids.finding_cause(48) == "ecc_uncorrectable"
    assert xids.finding_cause(64) == "row_remap_failure"
    assert xids.finding_cause(74) == "xid_74"
    assert xids.finding_cause(13) == "xid_13"


def test_promql_regex() -> None:
    assert xids.promql_regex({79, 48, 8}) == "8|48|79"
    assert xids.promql_regex([64, 64]) == "64"


def test_generated_drain_rule_matches_exactly_the_drain_class() -> None:
    rules = yaml.safe_load((ROOT / "alerts" / "fleetscope-gpu.rules.yml").read_text())
    alerts = {r["alert"]: r["expr"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
    for name, klass in (
        ("FleetscopeGpuXidDrain", "drain"),
        ("FleetscopeGpuXidWatch", "watch"),
        ("FleetscopeGpuXidApplication", "application"),
    ):
        assert f'xid=~"{xids.promql_regex(xids.codes(klass))}"' in alerts[name]


def test_the_contract_no_longer_carries_xid_or_hardware_names() -> None:
    """XIDs live in fleetscope.xids and hardware facts in fleetscope.hardware, each in one place."""
    gone = (
        "XID_DRAIN",
        "XID_WATCH",
        "XID_APPLICATION",
        "xid_class",
        "promql_regex",
        "XidClass",
        "peak_flops",
        "PEAK_FLOPS_TABLE",
        "RECOVERY_ACTIONS",
        "CLOCK_EVENT_HW_THERMAL",
    )
    assert [name for name in gone if hasattr(contract, name)] == []
