"""The parallel layout: discovery from Megatron, DeepSpeed, a DeviceMesh and the environment.

Megatron-LM and DeepSpeed are not installed here, so their objects are small stand-ins with the
same attribute names (``megatron.core.parallel_state``'s getters; DeepSpeed's
``PipelineParallelGrid``, ``PipelineModule`` and engine); the DeviceMesh is PyTorch's own, in two
real gloo processes.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from fleetscope import contract
from fleetscope.exporters.training import parse_rank_file
from fleetscope.telemetry import TrainingMonitor
from fleetscope.telemetry.layout import (
    ENV_VARS,
    Layout,
    LayoutResolver,
    from_deepspeed,
    from_device_mesh,
    from_env,
    from_frameworks,
    from_megatron,
    from_object,
)

ROOT = Path(__file__).resolve().parents[2]


def megatron_state(initialized: bool = True, **ranks: int) -> SimpleNamespace:
    """A stand-in for ``megatron.core.parallel_state`` (module-level getter functions)."""
    state = SimpleNamespace(initialized=initialized)
    state.model_parallel_is_initialized = lambda: state.initialized
    for name, getter in [
        ("pp", "get_pipeline_model_parallel_rank"),
        ("dp", "get_data_parallel_rank"),
        ("tp", "get_tensor_model_parallel_rank"),
        ("cp", "get_context_parallel_rank"),
        ("ep", "get_expert_model_parallel_rank"),
    ]:
        if name in ranks:
            setattr(state, getter, lambda v=ranks[name]: v)
    return state


class Grid:
    """DeepSpeed's ``PipelineParallelGrid`` method names; its model-parallel rank spans pp x tp."""

    def __init__(self, stage: int, dp: int, tp: int) -> None:
        self.stage, self.dp, self.tp = stage, dp, tp

    def get_stage_id(self) -> int:
        return self.stage

    def get_pipe_parallel_rank(self) -> int:
        return self.stage

    def get_data_parallel_rank(self) -> int:
        return self.dp

    def get_slice_parallel_rank(self) -> int:
        return self.tp

    def get_model_parallel_rank(self) -> int:
        return 100 + self.stage * 2 + self.tp  # must never be taken for the tensor-parallel rank


class PipelineModule:
    def __init__(self, grid: Grid) -> None:
        self._grid = grid
        self.stage_id = grid.stage

    def mpu(self) -> Grid:
        return self._grid

    def __call__(self, *args: Any) -> None:  # a torch.nn.Module is callable
        raise AssertionError("discovery must not run the model")


class PipelineEngine:
    def __init__(self, module: PipelineModule) -> None:
        self.module = module
        self.grid = module._grid
        self.mpu = module._grid
        self.stage_id = module.stage_id

    def __call__(self, *args: Any) -> None:
        raise AssertionError("discovery must not run the model")


class FakeMesh:
    """``torch.distributed.DeviceMesh``'s names: ``mesh_dim_names``, ``get_local_rank``, ``size``."""

    def __init__(self, **dims: tuple[int, int]) -> None:  # name -> (local rank, size)
        self.dims = dims
        self.mesh_dim_names = tuple(dims)

    def get_local_rank(self, mesh_dim: int | str | None = None) -> int:
        return self.dims[mesh_dim][0]  # type: ignore[index]  # KeyError like the real one

    def size(self, mesh_dim: int | None = None) -> int:
        return self.dims[self.mesh_dim_names[mesh_dim]][1]  # type: ignore[index]


# ---- each source --------------------------------------------------------------------------------
def test_megatron_parallel_state_once_initialized() -> None:
    state = megatron_state(initialized=False, pp=3, dp=5, tp=1, cp=0, ep=2)
    assert from_megatron(state) == Layout()  # before initialize_model_parallel: nothing
    state.initialized = True
    assert from_megatron(state) == Layout(3, 5, 1, 0, 2)
    old = megatron_state(pp=1, dp=0, tp=1)  # an older Megatron without context/expert parallelism
    assert from_megatron(old) == Layout(pipeline_stage=1, data_parallel_rank=0, tensor_parallel_rank=1)


def test_a_getter_that_raises_or_lies_leaves_only_its_field_unknown() -> None:
    state = megatron_state(pp=2, dp=4, tp=0)

    def broken() -> int:
        raise AssertionError("context parallel group is not initialized")

    state.get_context_parallel_rank = broken
    state.get_expert_model_parallel_rank = lambda: -1
    state.get_tensor_model_parallel_rank = lambda: "zero"
    assert from_megatron(state) == Layout(pipeline_stage=2, data_parallel_rank=4)
    state.model_parallel_is_initialized = broken
    assert from_megatron(state) == Layout()  # never raises


def test_deepspeed_grid_module_and_engine() -> None:
    grid = Grid(stage=1, dp=3, tp=1)
    expected = Layout(pipeline_stage=1, data_parallel_rank=3, tensor_parallel_rank=1)
    assert from_deepspeed(grid) == expected  # the slice rank, not the pp x tp model-parallel rank
    assert from_deepspeed(PipelineModule(grid)) == expected
    assert from_deepspeed(PipelineEngine(PipelineModule(grid))) == expected
    assert from_object(PipelineEngine(PipelineModule(grid))) == expected


def test_deepspeed_with_a_megatron_mpu_and_ulysses_sequence_parallelism() -> None:
    mpu = SimpleNamespace(
        get_pipeline_model_parallel_rank=lambda: 0,
        get_data_parallel_rank=lambda: 6,
        get_tensor_model_parallel_rank=lambda: 2,
        get_model_parallel_rank=lambda: 99,
    )
    engine = SimpleNamespace(mpu=mpu, module=SimpleNamespace())
    assert from_deepspeed(engine) == Layout(0, 6, 2)
    legacy = SimpleNamespace(get_data_parallel_rank=lambda: 1, get_model_parallel_rank=lambda: 3)
    assert from_deepspeed(legacy) == Layout(data_parallel_rank=1, tensor_parallel_rank=3)
    ulysses = SimpleNamespace(get_data_parallel_rank=lambda: 0, get_sequence_parallel_rank=lambda: 5)
    assert from_deepspeed(ulysses) == Layout(data_parallel_rank=0, context_parallel_rank=5)


def test_device_mesh_dims_torchtitan_names() -> None:
    mesh = FakeMesh(pp=(2, 4), dp_replicate=(1, 2), dp_shard=(3, 4), cp=(1, 2), tp=(0, 8))
    # dp = replicate * shards + shard = 1 * 4 + 3
    assert from_device_mesh(mesh) == Layout(2, 7, 0, 1, None)
    assert from_object(FakeMesh(dp=(5, 8), tp=(1, 2))) == Layout(data_parallel_rank=5, tensor_parallel_rank=1)
    assert from_device_mesh(FakeMesh(dp_shard=(3, 4))) == Layout(data_parallel_rank=3)
    assert from_device_mesh(SimpleNamespace(mesh_dim_names=None)) == Layout()  # an unnamed mesh


def test_frameworks_are_found_in_sys_modules_only() -> None:
    state = megatron_state(pp=1, dp=2, tp=0)
    assert from_frameworks({"megatron.core.parallel_state": state}) == Layout(1, 2, 0)
    groups = SimpleNamespace(mpu=Grid(stage=3, dp=0, tp=1))
    assert from_frameworks({"deepspeed.utils.groups": groups}) == Layout(3, 0, 1)
    assert from_frameworks({"deepspeed.utils.groups": SimpleNamespace(mpu=None)}) == Layout()
    assert from_frameworks({}) == Layout()


def test_environment_fallback_and_bad_values(caplog: pytest.LogCaptureFixture) -> None:
    assert set(ENV_VARS) == set(contract.LAYOUT_LABELS)
    env = {
        "FLEETSCOPE_PIPELINE_STAGE": "3",
        "FLEETSCOPE_DATA_PARALLEL_RANK": " 12 ",
        "FLEETSCOPE_TENSOR_PARALLEL_RANK": "two",
        "FLEETSCOPE_EXPERT_PARALLEL_RANK": "",
    }
    with caplog.at_level(logging.WARNING, logger="fleetscope.telemetry"):
        layout = from_env(env)
    assert layout == Layout(pipeline_stage=3, data_parallel_rank=12)
    assert "tensor_parallel_rank='two'" in caplog.text


def test_precedence_explicit_then_object_then_frameworks_then_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "megatron.core.parallel_state", megatron_state(pp=9, dp=9, tp=9, cp=9))
    env = {v: "8" for v in ENV_VARS.values()}
    resolver = LayoutResolver(FakeMesh(pp=(1, 2), dp=(4, 8)), env)
    resolver.set(pipeline_stage=0)
    assert resolver.resolve() == Layout(0, 4, 9, 9, 8)
    resolver.set({"tensor_parallel_rank": 2}, expert_parallel_rank=3)
    assert resolver.resolve() == Layout(0, 4, 2, 9, 3)


# ---- through the monitor and the rank file ------------------------------------------------------
def _info_labels(path: str) -> dict[str, str]:
    _header, _rank, samples = parse_rank_file(Path(path).read_text())
    (extra,) = [extra for name, extra, _ in samples if name == contract.TRAINING_INFO]
    keys = [k for k in contract.TRAINING_INFO.labels if k not in contract.TRAINING_LABELS]
    return dict(zip(keys, extra, strict=True))


def test_monitor_writes_the_layout_on_training_info(tmp_path: Path) -> None:
    env = {"FLEETSCOPE_TENSOR_PARALLEL_RANK": "1"}
    m = TrainingMonitor(
        job_id="j", rank=5, directory=tmp_path, start=False, env=env, layout={"pipeline_stage": 2}
    )
    m.set_layout(data_parallel_rank=1)
    assert m.flush()
    assert _info_labels(m.writer.path) == {
        "flops_convention": "custom",
        "pipeline_stage": "2",
        "data_parallel_rank": "1",
        "tensor_parallel_rank": "1",
        "context_parallel_rank": "",
        "expert_parallel_rank": "",
    }
    m.close()


def test_monitor_created_before_the_parallel_groups_finds_them_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = megatron_state(initialized=False, pp=1, dp=0, tp=3)
    monkeypatch.setitem(sys.modules, "megatron.core.parallel_state", state)
    m = TrainingMonitor(job_id="j", directory=tmp_path, start=False, env={})
    assert m.flush() and _info_labels(m.writer.path)["pipeline_stage"] == ""
    state.initialized = True  # initialize_model_parallel() ran after the monitor was created
    assert m.flush() and _info_labels(m.writer.path)["pipeline_stage"] == "1"
    assert m.layout == Layout(1, 0, 3)
    m.close()


def test_bad_layout_arguments_never_raise(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    m = TrainingMonitor(job_id="j", directory=tmp_path, start=False, env={}, layout=object())
    m.set_layout(pipeline_stage=-1, tensor_parallel_rank="x", dp=3)
    m.set_layout(12345)
    assert m.flush() and set(_info_labels(m.writer.path).values()) == {"custom", ""}
    assert "pipeline_stage=-1" in caplog.text and "dp=3" in caplog.text
    m.close()


def test_layout_module_imports_no_framework() -> None:
    code = (
        "import sys, fleetscope.telemetry.layout as l, fleetscope.telemetry as t\n"
        "t.TrainingMonitor(job_id='j', start=False, env={}).snapshot()\n"
        "print(sorted(m for m in ('torch', 'megatron', 'deepspeed') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---- a real DeviceMesh --------------------------------------------------------------------------
MESH_SCRIPT = textwrap.dedent(
    """
    import json
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from fleetscope.telemetry.layout import from_device_mesh

    dist.init_process_group("gloo")
    out = {}
    pp_tp = init_device_mesh("cpu", (2, 1), mesh_dim_names=("pp", "tp"))
    out["pp_tp"] = from_device_mesh(pp_tp).labels()
    fsdp = init_device_mesh("cpu", (2, 1), mesh_dim_names=("dp_replicate", "dp_shard"))
    out["hsdp"] = from_device_mesh(fsdp).labels()
    titan = init_device_mesh("cpu", (1, 2, 1), mesh_dim_names=("dp_replicate", "dp_shard", "cp"))
    titan["dp_replicate", "dp_shard"]._flatten("dp")
    out["titan"] = from_device_mesh(titan).labels()
    print(json.dumps(out), flush=True)
    dist.destroy_process_group()
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.torch
def test_real_device_mesh_in_two_gloo_processes() -> None:
    port = _free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, "-W", "ignore", "-c", MESH_SCRIPT],
            cwd=ROOT,
            env={
                **os.environ,
                "PYTHONPATH": str(ROOT),
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port),
                "WORLD_SIZE": "2",
                "RANK": str(rank),
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outs]
    got = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    for rank, layout in enumerate(got):
        assert layout["pp_tp"] == {"pipeline_stage": str(rank), "tensor_parallel_rank": "0"}
        assert layout["hsdp"] == {"data_parallel_rank": str(rank)}  # replicate * 1 shard + 0
        assert layout["titan"] == {"data_parallel_rank": str(rank), "context_parallel_rank": "0"}
