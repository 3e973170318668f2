"""The detector registry: every detector implements the one interface and produces contract kinds."""

from __future__ import annotations

from fleetscope import contract as c
from fleetscope.analyzers.detectors import DETECTORS, Detector


def test_every_detector_is_a_detector_with_contract_kinds():
    assert DETECTORS, "no detectors registered"
    names = [d.name for d in DETECTORS]
    assert len(set(names)) == len(names), names
    produced: set[str] = set()
    for d in DETECTORS:
        assert isinstance(d, Detector) and issubclass(type(d), Detector), d
        assert d.kinds, f"{d.name} declares no finding kinds"
        assert set(d.kinds) <= set(c.FINDING_KINDS), (d.name, d.kinds)
        produced |= set(d.kinds)
    # Every kind the contract names has a detector that can produce it.
    assert produced == set(c.FINDING_KINDS)
