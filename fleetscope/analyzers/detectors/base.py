"""The one interface every detector implements (like the exporter's collectors).

A detector reads the shared :class:`~fleetscope.analyzers.features.Features` of a window and the
findings of the detectors that ran before it, and returns its own findings. It never loads data,
never prints, and keeps no state between analyses. A new detector is one module with a subclass of
:class:`Detector` plus one line in :data:`fleetscope.analyzers.detectors.DETECTORS`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar

from fleetscope.analyzers.features import Features
from fleetscope.analyzers.findings import Finding


class Detector(ABC):
    """One kind of problem. Subclasses set :attr:`name` and :attr:`kinds` and implement :meth:`detect`."""

    #: Short name, used in logs and docs.
    name: ClassVar[str]
    #: The finding kinds this detector can produce (members of ``contract.FINDING_KINDS``).
    kinds: ClassVar[tuple[str, ...]]

    @abstractmethod
    def detect(self, feat: Features, prior: Sequence[Finding]) -> list[Finding]:
        """The findings in the window. ``prior`` holds the earlier detectors' findings, in order."""
