"""The one interface every detector implements (like the exporter's collectors).

A detector reads the window's :class:`~fleetscope.analyzers.signals.window_signals.Signals` (and,
through them, its :class:`~fleetscope.analyzers.features.Features`) and the findings of the
detectors that ran before it, and *returns* a :class:`Detection`: its findings and what it learnt
of this window for the next chunk of a streamed one. It writes nothing else: never loads data,
never prints, keeps no state between analyses, imports no other detector (a signal two places
read lives in :mod:`fleetscope.analyzers.signals`). A new detector is one module with a subclass
of :class:`Detector` plus one line in :data:`fleetscope.analyzers.detectors.DETECTORS`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from fleetscope.analyzers.carry import Carry
from fleetscope.analyzers.findings import Finding
from fleetscope.analyzers.signals.window_signals import Signals


@dataclass
class Detection:
    """What one detector returns for one window."""

    #: Its findings, in the detector's own order.
    findings: list[Finding]
    #: What the next chunk of a streamed window needs of this one (empty for most detectors).
    learnt: Carry = field(default_factory=Carry)


class Detector(ABC):
    """One kind of problem. Subclasses set :attr:`name` and :attr:`kinds` and implement :meth:`detect`."""

    #: Short name, used in logs and docs.
    name: ClassVar[str]
    #: The finding kinds this detector can produce (members of ``contract.FINDING_KINDS``).
    kinds: ClassVar[tuple[str, ...]]

    @abstractmethod
    def detect(self, signals: Signals, prior: Sequence[Finding]) -> Detection:
        """The findings in the window. ``prior`` holds the earlier detectors' findings, in order."""
