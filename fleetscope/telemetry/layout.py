"""Where a rank sits in the job's parallel layout: pipeline stage and data/tensor/context/expert ranks.

Ranks on different pipeline stages (or holding different experts) do different work, so their
step phases differ by design; the straggler detector compares a rank only with the ranks that
share its structure, and needs to know it. The layout goes out on ``training_info`` with the
label keys of ``contract.LAYOUT_LABELS``; a value nobody knows is left out.

Every source here is best effort and never raises: a getter that fails, or returns something that
is not a non-negative integer, simply leaves that field unknown. Nothing is imported: the
frameworks are looked up in ``sys.modules`` (a framework that is in use is already imported) or
passed in by the caller. The sources, first one that knows a field wins:

1. explicit values: ``TrainingMonitor(layout=...)`` / ``monitor.set_layout(...)``;
2. an object passed as ``layout=`` (a ``torch.distributed.DeviceMesh``, a DeepSpeed engine,
   ``PipelineModule`` or grid, a Megatron ``parallel_state`` module or an mpu);
3. Megatron-LM / NeMo, when ``megatron.core.parallel_state`` is imported and initialized;
4. DeepSpeed, when ``deepspeed.utils.groups`` is imported and holds an mpu (``deepspeed.initialize``
   puts the engine's mpu, the pipeline grid for a ``PipelineModule``, there);
5. the environment: ``FLEETSCOPE_PIPELINE_STAGE``, ``FLEETSCOPE_DATA_PARALLEL_RANK``,
   ``FLEETSCOPE_TENSOR_PARALLEL_RANK``, ``FLEETSCOPE_CONTEXT_PARALLEL_RANK``,
   ``FLEETSCOPE_EXPERT_PARALLEL_RANK``.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from fleetscope import contract

log = logging.getLogger("fleetscope.telemetry")

#: Environment variable of each layout field.
ENV_VARS: dict[str, str] = {
    "pipeline_stage": "FLEETSCOPE_PIPELINE_STAGE",
    "data_parallel_rank": "FLEETSCOPE_DATA_PARALLEL_RANK",
    "tensor_parallel_rank": "FLEETSCOPE_TENSOR_PARALLEL_RANK",
    "context_parallel_rank": "FLEETSCOPE_CONTEXT_PARALLEL_RANK",
    "expert_parallel_rank": "FLEETSCOPE_EXPERT_PARALLEL_RANK",
}

#: DeviceMesh dimension names (torchtitan's, and the usual spellings) of each field. ``dp`` is the
#: flattened data-parallel dimension; without it, ``dp_replicate`` and ``dp_shard`` are combined.
MESH_DIMS: dict[str, tuple[str, ...]] = {
    "pipeline_stage": ("pp", "pipe", "pipeline"),
    "data_parallel_rank": ("dp", "data"),
    "tensor_parallel_rank": ("tp", "tensor", "model"),
    "context_parallel_rank": ("cp", "context", "sp"),
    "expert_parallel_rank": ("ep", "expert"),
}


#: Dimensions torchtitan flattens from others (not in the root mesh's ``mesh_dim_names``).
_FLATTENED = frozenset({"dp", "ep"})


@dataclass(frozen=True)
class Layout:
    """A rank's coordinates in the parallel layout; None where unknown."""

    pipeline_stage: int | None = None
    data_parallel_rank: int | None = None
    tensor_parallel_rank: int | None = None
    context_parallel_rank: int | None = None
    expert_parallel_rank: int | None = None

    def labels(self) -> dict[str, str]:
        """The known fields as ``training_info`` label values, in ``contract.LAYOUT_LABELS`` order."""
        out = {}
        for key in contract.LAYOUT_LABELS:
            value = getattr(self, key)
            if value is not None:
                out[key] = str(value)
        return out

    def known(self) -> bool:
        return any(getattr(self, name) is not None for name in _FIELDS)

    def complete(self) -> bool:
        return all(getattr(self, name) is not None for name in _FIELDS)

    def over(self, other: Layout) -> Layout:
        """This layout, with its unknown fields taken from ``other`` (the writer calls it at every
        write: plain attribute reads, no copy when ``other`` adds nothing)."""
        missing = {n: v for n in _FIELDS if getattr(self, n) is None and (v := getattr(other, n)) is not None}
        return replace(self, **missing) if missing else self


EMPTY = Layout()
_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Layout))
assert _FIELDS == contract.LAYOUT_LABELS, "Layout fields must be the contract's layout labels"


def _rank(value: Any) -> int | None:
    """A non-negative int from an int, a numeric string or a 0-d tensor; else None."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = int(value.item()) if hasattr(value, "item") else int(str(value).strip())
    except (TypeError, ValueError, AttributeError, RuntimeError):
        return None
    return number if number >= 0 else None


def _call(obj: Any, *names: str) -> int | None:
    """The first of ``obj.<name>()`` that exists and returns a rank; None when none does."""
    for name in names:
        getter = getattr(obj, name, None)
        if not callable(getter):
            continue
        try:
            value = _rank(getter())
        except Exception as exc:  # noqa: BLE001 - a framework's getter must never break training
            log.debug("layout: %s.%s() failed: %s", type(obj).__name__, name, exc)
            continue
        if value is not None:
            return value
    return None


def _checked(what: str, fn: Callable[[], Layout]) -> Layout:
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - discovery is best effort
        log.debug("layout: %s discovery failed: %s", what, exc)
        return EMPTY


# ---- sources ---------------------------------------------------------------------------------
def from_values(values: Mapping[str, Any] | None = None, **kwargs: Any) -> Layout:
    """A layout from label keys to ranks; unknown keys and non-rank values are dropped (logged)."""
    merged = {**(values or {}), **kwargs}
    good: dict[str, int] = {}
    for key, value in merged.items():
        if value is None:
            continue
        number = _rank(value)
        if key not in _FIELDS or number is None:
            log.warning(
                "fleetscope telemetry: ignoring layout %s=%r (not a layout field or not a rank)", key, value
            )
            continue
        good[key] = number
    return Layout(**good)


def from_env(env: Mapping[str, str]) -> Layout:
    """``FLEETSCOPE_PIPELINE_STAGE`` and the other ``ENV_VARS``; a bad value is logged and ignored."""
    return from_values({key: env.get(var, "").strip() or None for key, var in ENV_VARS.items()})


def from_megatron(parallel_state: Any) -> Layout:
    """Megatron-LM / NeMo: ``megatron.core.parallel_state`` (the module), once it is initialized."""

    def read() -> Layout:
        is_initialized = getattr(parallel_state, "model_parallel_is_initialized", None)
        if callable(is_initialized) and not is_initialized():
            return EMPTY
        return Layout(
            pipeline_stage=_call(parallel_state, "get_pipeline_model_parallel_rank"),
            data_parallel_rank=_call(parallel_state, "get_data_parallel_rank"),
            tensor_parallel_rank=_call(parallel_state, "get_tensor_model_parallel_rank"),
            context_parallel_rank=_call(parallel_state, "get_context_parallel_rank"),
            expert_parallel_rank=_call(parallel_state, "get_expert_model_parallel_rank"),
        )

    return _checked("megatron", read)


def from_device_mesh(mesh: Any) -> Layout:
    """A ``torch.distributed.DeviceMesh`` with named dimensions (torchtitan: ``pp``, ``dp_replicate``,
    ``dp_shard``, ``cp``, ``tp``; flattened ``dp`` when present)."""

    def read() -> Layout:
        names = tuple(getattr(mesh, "mesh_dim_names", None) or ())
        found: dict[str, int] = {}
        for key, dims in MESH_DIMS.items():
            for dim in dims:
                if dim in names or (dim in _FLATTENED and names):
                    value = _mesh_local_rank(mesh, dim)
                    if value is not None:
                        found[key] = value
                        break
        if "data_parallel_rank" not in found:
            dp = _mesh_hsdp_rank(mesh, names)
            if dp is not None:
                found["data_parallel_rank"] = dp
        return Layout(**found)

    return _checked("device mesh", read)


def _mesh_local_rank(mesh: Any, name: str) -> int | None:
    """This rank's index along the mesh dimension ``name``; None when the mesh has no such one."""
    try:
        return _rank(mesh.get_local_rank(mesh_dim=name))
    except Exception:  # noqa: BLE001 - not a dimension of this mesh
        pass
    try:  # a flattened dimension (torchtitan's "dp") is reachable by indexing only
        return _rank(mesh[name].get_local_rank())
    except Exception:  # noqa: BLE001
        return None


def _mesh_size(mesh: Any, name: str) -> int | None:
    try:
        return _rank(mesh.size(mesh_dim=list(mesh.mesh_dim_names).index(name)))
    except Exception:  # noqa: BLE001
        return None


def _mesh_hsdp_rank(mesh: Any, names: tuple[str, ...]) -> int | None:
    """The data-parallel rank of an HSDP mesh (``dp_replicate`` x ``dp_shard``, no flattened ``dp``)."""
    if "dp_replicate" not in names and "dp_shard" not in names:
        return None
    replicate = _mesh_local_rank(mesh, "dp_replicate") if "dp_replicate" in names else 0
    shard = _mesh_local_rank(mesh, "dp_shard") if "dp_shard" in names else 0
    shards = _mesh_size(mesh, "dp_shard") if "dp_shard" in names else 1
    if replicate is None or shard is None or shards is None:
        return None
    return replicate * shards + shard


def from_deepspeed(obj: Any) -> Layout:
    """DeepSpeed: an engine, a ``PipelineModule``, a pipeline grid or an mpu.

    An engine's pipeline grid is ``engine.grid`` (a ``PipelineModule``'s is ``_grid``), its mpu
    ``engine.mpu``. A grid names the tensor-parallel rank ``get_slice_parallel_rank`` (its
    ``get_model_parallel_rank`` spans pipeline and tensor ranks, so it is not used); a Megatron
    mpu names it ``get_tensor_model_parallel_rank``. A ``PipelineModule`` and a pipeline engine
    also carry ``stage_id``.
    """

    def read() -> Layout:
        layout = EMPTY
        for holder in _deepspeed_holders(obj):
            layout = layout.over(_grid_or_mpu(holder))
        stage = _rank(getattr(obj, "stage_id", None))
        return layout.over(Layout(pipeline_stage=stage))

    return _checked("deepspeed", read)


def _deepspeed_holders(obj: Any) -> Iterable[Any]:
    """The object itself, then its grid and mpu (an engine's, or its wrapped PipelineModule's)."""
    yield obj
    seen = {id(obj)}
    module = getattr(obj, "module", None)  # an engine wraps the PipelineModule
    for candidate in (
        getattr(obj, "grid", None),
        getattr(obj, "_grid", None),
        getattr(obj, "mpu", None),  # an engine's mpu; a PipelineModule's mpu() is a method: skipped
        getattr(module, "_grid", None),
    ):
        if candidate is not None and not callable(candidate) and id(candidate) not in seen:
            seen.add(id(candidate))
            yield candidate


def _grid_or_mpu(obj: Any) -> Layout:
    is_grid = callable(getattr(obj, "get_stage_id", None)) or callable(
        getattr(obj, "get_pipe_parallel_rank", None)
    )
    tensor = _call(obj, "get_tensor_model_parallel_rank", "get_slice_parallel_rank")
    if tensor is None and not is_grid:
        tensor = _call(obj, "get_model_parallel_rank")  # older Megatron mpu spelling
    return Layout(
        pipeline_stage=_call(
            obj, "get_pipeline_model_parallel_rank", "get_stage_id", "get_pipe_parallel_rank"
        ),
        data_parallel_rank=_call(obj, "get_data_parallel_rank"),
        tensor_parallel_rank=tensor,
        context_parallel_rank=_call(obj, "get_context_parallel_rank", "get_sequence_parallel_rank"),
        expert_parallel_rank=_call(obj, "get_expert_model_parallel_rank"),
    )


def from_object(source: Any) -> Layout:
    """Whatever was passed as ``layout=``: a :class:`Layout`, a mapping, a DeviceMesh, a Megatron
    ``parallel_state`` module, or a DeepSpeed engine/module/grid/mpu."""
    if source is None:
        return EMPTY
    if isinstance(source, Layout):
        return source
    if isinstance(source, Mapping):
        return from_values(source)
    if hasattr(source, "mesh_dim_names"):
        return from_device_mesh(source)
    if callable(getattr(source, "model_parallel_is_initialized", None)):
        return from_megatron(source)
    layout = from_deepspeed(source)
    if not layout.known():
        log.debug("layout: nothing known about %s", type(source).__name__)
    return layout


def from_frameworks(modules: Mapping[str, Any] | None = None) -> Layout:
    """Megatron-LM/NeMo, then DeepSpeed, when they are already imported (nothing is imported here)."""
    modules = sys.modules if modules is None else modules
    layout = EMPTY
    parallel_state = modules.get("megatron.core.parallel_state")
    if parallel_state is not None:
        layout = layout.over(from_megatron(parallel_state))
    groups = modules.get("deepspeed.utils.groups")
    mpu = getattr(groups, "mpu", None) if groups is not None else None
    if mpu is not None:
        layout = layout.over(from_deepspeed(mpu))
    return layout


class LayoutResolver:
    """The monitor's layout: explicit values over a passed object over the frameworks over the env.

    The passed object and the frameworks are asked again (on the writer thread, at each write)
    until they answer, since a monitor is often created before the parallel groups exist; once a
    source has answered, its answer is kept.
    """

    def __init__(self, source: Any = None, env: Mapping[str, str] | None = None) -> None:
        self._explicit = EMPTY
        self._source: Any = None
        self._from_source = EMPTY
        self._from_frameworks = EMPTY
        self._from_env = from_env(env or {})
        self.set(source)

    def set(self, source: Any = None, **values: Any) -> None:
        """Add explicit values (over the earlier ones) and/or replace the object to ask."""
        explicit = from_values(values)
        if isinstance(source, Layout | Mapping):
            explicit = explicit.over(from_object(source))
        elif source is not None:
            self._source = source
            self._from_source = EMPTY
        self._explicit = explicit.over(self._explicit)

    def resolve(self) -> Layout:
        """The current layout (may call framework getters: run it on the writer thread)."""
        layout = self._explicit
        if layout.complete():
            return layout
        if self._source is not None and not self._from_source.known():
            self._from_source = from_object(self._source)
        if not self._from_frameworks.known():
            self._from_frameworks = from_frameworks()
        return layout.over(self._from_source).over(self._from_frameworks).over(self._from_env)
