"""The simulator's family registry: every scenario family has one simulator family, whose parts load."""

from __future__ import annotations

from dataclasses import fields

import pytest

from fleetscope.errors import FleetscopeError
from fleetscope.simulate import families
from fleetscope.simulate.families import FAMILIES, cluster_model, family_of_scenario
from fleetscope.simulate.model import ClusterModel
from fleetscope.simulate.spec import FAMILIES as SCENARIO_FAMILIES
from fleetscope.simulate.spec import FaultSpec, ScenarioSpec


def test_every_scenario_family_runs_in_exactly_one_simulator_family():
    names = [s for fam in FAMILIES for s in fam.scenarios]
    assert sorted(names) == sorted(SCENARIO_FAMILIES) and len(set(names)) == len(names)
    assert [f.name for f in FAMILIES] == ["classic", "training", "inference", "neuron"]
    assert family_of_scenario("hang").name == "training"
    with pytest.raises(FleetscopeError, match="unknown family"):
        family_of_scenario("nope")


@pytest.mark.parametrize("fam", FAMILIES, ids=lambda f: f.name)
def test_each_family_names_a_model_a_truth_a_check_and_spec_fields(fam):
    assert issubclass(fam.model_class(), ClusterModel)
    assert callable(fam.truth_function()) and callable(families._load(fam.check))
    spec_fields = {f.name for f in fields(ScenarioSpec)}
    assert set(fam.options) <= spec_fields


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("x", "ClusterModel"),
        ("pipeline_x", "RealisticModel"),
        ("inference_x", "InferenceModel"),
        ("neuron_x", "NeuronModel"),
    ],
)
def test_a_spec_gets_its_familys_model_and_truth(name, model):
    spec = ScenarioSpec(
        name=name,
        nodes=1,
        duration_s=60,
        faults=[FaultSpec(kind="power_brake", at_s=30, node=0)] if not name.startswith("neuron") else [],
    )
    assert type(cluster_model(spec)).__name__ == model
    truth = families.ground_truth(spec)
    assert truth["family"] == spec.family and len(truth["faults"]) == len(spec.faults)


def test_the_base_model_refuses_a_realistic_spec():
    with pytest.raises(TypeError, match=r"families\.cluster_model"):
        ClusterModel(ScenarioSpec(name="hang_x", nodes=1))
