"""The model of a spec's family: the one place that knows every simulator family's model class.

The base model (:mod:`fleetscope.simulate.model`) imports no family; each family's module imports
the base; this module imports them all and picks one, so no import runs in a loop.
"""

from __future__ import annotations

from fleetscope.simulate.inference import InferenceModel
from fleetscope.simulate.jobs import RealisticModel
from fleetscope.simulate.model import ClusterModel
from fleetscope.simulate.neuron import NeuronModel
from fleetscope.simulate.spec import ScenarioSpec


def cluster_model(spec: ScenarioSpec, scrape_labels: bool = True) -> ClusterModel:
    """The model of ``spec``: Trainium nodes (``neuron``), a serving fleet (``inference``), the
    realistic jobs of the other realistic families, or the classic model."""
    if spec.family == "neuron":
        return NeuronModel(spec, scrape_labels)
    if spec.family == "inference":
        return InferenceModel(spec, scrape_labels)
    if spec.realistic:
        return RealisticModel(spec, scrape_labels)
    return ClusterModel(spec, scrape_labels)
