"""The detectors, in the order they run: each sees the findings of those before it.

Order matters where a detector explains or suppresses another's evidence: the failing-node detector
runs first (hardware that must leave the job), stragglers next, then hangs (whose root cause may be
an earlier failing-node finding) and membership changes, and the MFU-drop detector last, so a drop
can be attributed to the finding that caused it.
"""

from __future__ import annotations

from fleetscope.analyzers.detectors.base import Detector
from fleetscope.analyzers.detectors.failing_node import FailingNodeDetector
from fleetscope.analyzers.detectors.hang import HangDetector
from fleetscope.analyzers.detectors.inference import InferenceDetector
from fleetscope.analyzers.detectors.membership import MembershipDetector
from fleetscope.analyzers.detectors.mfu_drop import MfuDropDetector
from fleetscope.analyzers.detectors.neuron import NeuronDetector
from fleetscope.analyzers.detectors.straggler import StragglerDetector

#: Every detector, in run order. Add a new one here.
DETECTORS: tuple[Detector, ...] = (
    FailingNodeDetector(),
    NeuronDetector(),
    StragglerDetector(),
    HangDetector(),
    MembershipDetector(),
    InferenceDetector(),
    MfuDropDetector(),
)

__all__ = ["DETECTORS", "Detector"]
