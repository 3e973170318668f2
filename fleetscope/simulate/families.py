"""The simulator's families: one registry, like the exporter's collectors and the analyzers' detectors.

A family is one module holding its model (a subclass of :class:`fleetscope.simulate.model.ClusterModel`,
or that class itself for ``classic``), its ground truth and its spec check; this registry names them
by import path (as ``fleetscope.exporters.registry.KNOWN_COLLECTORS`` names the collectors) and says
which scenario names it runs and which spec fields it owns. A new family: its module and one line in
:data:`FAMILIES`.

This module imports no family at module level, so the spec (which checks itself against the
registry) and the base model import no family either, and no import runs in a loop.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fleetscope.errors import FleetscopeError

if TYPE_CHECKING:
    from fleetscope.simulate.model import ClusterModel
    from fleetscope.simulate.spec import ScenarioSpec

#: A family's ground truth: (spec, the simulated goodput account or None) -> the truth JSON.
TruthFunction = Callable[["ScenarioSpec", "dict[str, dict[str, float]] | None"], "dict[str, Any]"]


@dataclass(frozen=True)
class Family:
    """One simulator family: what it runs, what it owns, where its parts live.

    ``model``, ``truth`` and ``check`` are ``"module:name"`` paths, imported when a spec of the
    family is checked, simulated or scored.
    """

    name: str
    #: The scenario families (``ScenarioSpec.family``, scored together by ``fleetscope evaluate``)
    #: this simulator family runs; a spec's file name starts with one of them.
    scenarios: tuple[str, ...]
    #: The model class, ``(spec, scrape_labels) -> ClusterModel``.
    model: str
    #: The ground truth (:data:`TruthFunction`).
    truth: str
    #: The family's own spec rules, ``(spec) -> None``, raising ``FleetscopeError``.
    check: str
    #: The ``ScenarioSpec`` fields (spec options) only this family reads, beside the shared ones.
    options: tuple[str, ...] = ()

    def model_class(self) -> type[ClusterModel]:
        return _load(self.model)

    def truth_function(self) -> TruthFunction:
        return _load(self.truth)

    def check_spec(self, spec: ScenarioSpec) -> None:
        _load(self.check)(spec)


def _load(path: str) -> Any:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


#: The realistic training model's own spec fields (its jobs, phases, pauses and look-alikes).
TRAINING_OPTIONS: tuple[str, ...] = (
    "wait_phase", "jitter", "gpu_spread", "eval_every_s", "eval_s", "eval_phase", "gc_every_s", "gc_s",
    "scrape_miss", "emit_layout", "jobs", "pipeline_stages", "tensor_parallel", "expert_parallel", "mfu",
)  # fmt: skip

#: Every simulator family. Add a new one here (its module holds the model, truth and check).
FAMILIES: tuple[Family, ...] = (
    Family("classic", ("classic",), "fleetscope.simulate.model:ClusterModel",
           "fleetscope.simulate.classic:classic_truth", "fleetscope.simulate.classic:check_classic_spec"),
    Family("training", ("realistic", "pipeline", "pauses", "hang", "phase_straggler", "intermittent",
                        "node_level", "membership", "multi_job", "goodput",
                        "moe", "rx_drops", "flaky"),
           "fleetscope.simulate.jobs:RealisticModel", "fleetscope.simulate.truth:training_truth",
           "fleetscope.simulate.jobs:check_training_spec", TRAINING_OPTIONS),
    Family("inference", ("inference",), "fleetscope.simulate.inference:InferenceModel",
           "fleetscope.simulate.inference:inference_truth", "fleetscope.simulate.inference:check_inference_spec",  # noqa: E501
           ("gpus_per_replica", "served_model", "day_s")),
    Family("neuron", ("neuron",), "fleetscope.simulate.neuron:NeuronModel",
           "fleetscope.simulate.neuron:neuron_truth", "fleetscope.simulate.neuron:check_neuron_spec",
           TRAINING_OPTIONS),
)  # fmt: skip

#: Every scenario family name, in registry order.
SCENARIO_FAMILIES: tuple[str, ...] = tuple(s for fam in FAMILIES for s in fam.scenarios)


def family_of_scenario(scenario_family: str) -> Family:
    """The simulator family that runs specs of ``scenario_family`` (e.g. ``hang`` -> training)."""
    for fam in FAMILIES:
        if scenario_family in fam.scenarios:
            return fam
    raise FleetscopeError(f"unknown family {scenario_family!r}; one of: {', '.join(SCENARIO_FAMILIES)}")


def cluster_model(spec: ScenarioSpec, scrape_labels: bool = True) -> ClusterModel:
    """The model of ``spec``, built by its family's model class."""
    assert spec.family is not None  # set by ScenarioSpec.__post_init__
    return family_of_scenario(spec.family).model_class()(spec, scrape_labels)


def ground_truth(spec: ScenarioSpec, goodput: dict[str, dict[str, float]] | None = None) -> dict[str, Any]:
    """The ground truth of ``spec``, written by its family (``goodput``: the simulated account)."""
    assert spec.family is not None
    return family_of_scenario(spec.family).truth_function()(spec, goodput)
