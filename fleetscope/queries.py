"""Canonical PromQL expressions built from the contract's names.

The recording rules, the dashboards, the analyzers and the tests use these builders, so one
expression (MFU, tokens/s, compute time, retransmit ratio, ...) is written once. Each section is a
plain function returning a PromQL string; keep them free of dashboard variables unless the
function says so.
"""

from __future__ import annotations

from collections.abc import Callable

from fleetscope import contract

# --------------------------------------------------------------------------------------------
# rules: the expressions behind fleetscope's recording rules (fleetscope/alerts/recording.py).
# Dashboards and analyzers may read the recorded series (fleetscope.alerts.names) or reuse these.
# ``window`` is a PromQL duration ("5m") or a Grafana variable ("$__rate_interval").
# --------------------------------------------------------------------------------------------

_NODE = contract.NODE_LABEL


def _phase_regex(phases: tuple[str, ...]) -> str:
    return "|".join(phases)


def _gpu_peak(dtype: str) -> str:
    """One peak value per (node, GPU index), even when MIG instances or a second scrape job
    duplicate the GPU's series (a duplicate would make the join below fail for every rank)."""
    return f'max by ({_NODE}, gpu) ({contract.GPU_PEAK_FLOPS}{{dtype="{dtype}"}})'


def rank_mfu(window: str = "5m", dtype: str = "bf16") -> str:
    """MFU of each rank: its model FLOP/s over the dense peak of the GPU it runs on."""
    return (
        f"rate({contract.TRAINING_MODEL_FLOPS}[{window}]) / on ({_NODE}, gpu) group_left () "
        f"{_gpu_peak(dtype)}"
    )


def job_mfu(window: str = "5m", dtype: str = "bf16") -> str:
    """MFU of each job: the ranks' summed model FLOP/s over the summed peak of their GPUs."""
    flops = contract.TRAINING_MODEL_FLOPS
    gpus = f"group by (job_id, {_NODE}, gpu) ({flops})"
    peak = _gpu_peak(dtype)
    return (
        f"sum by (job_id) (rate({flops}[{window}]))"
        f" / sum by (job_id) ({gpus} * on ({_NODE}, gpu) group_left () {peak})"
    )


def job_tokens_rate(window: str = "5m") -> str:
    """Tokens per second of each job, summed over its ranks."""
    return f"sum by (job_id) (rate({contract.TRAINING_TOKENS}[{window}]))"


def rank_compute_rate(window: str = "5m") -> str:
    """Compute (forward + backward) seconds per second of each rank (docs/design.md#peers: compute time)."""
    phases = _phase_regex(contract.COMPUTE_PHASES)
    return f'sum without (phase) (rate({contract.TRAINING_PHASE_SECONDS}{{phase=~"{phases}"}}[{window}]))'


def job_step_seconds_mean(window: str = "5m") -> str:
    """Mean step time of each job in seconds; absent (not NaN) while no rank completes a step."""
    return (
        f"sum by (job_id) (rate({contract.TRAINING_STEP_SECONDS}[{window}]))"
        f" / (sum by (job_id) (rate({contract.TRAINING_STEPS}[{window}])) > 0)"
    )


def efa_retrans_ratio(window: str = "5m") -> str:
    """SRD retransmitted packets per transmitted packet, per EFA device and port."""
    return f"rate({contract.EFA_RETRANS_PKTS}[{window}]) / (rate({contract.EFA_TX_PKTS}[{window}]) > 0)"


def lustre_metadata_latency(window: str = "5m") -> str:
    """Mean latency (s) of metadata operations per client mount, over the operations timed in usecs."""
    ops = _phase_regex(contract.LUSTRE_METADATA_OPERATIONS)
    by = f"{_NODE}, fs, mount"
    seconds = f'rate({contract.LUSTRE_CLIENT_OPERATION_SECONDS}{{operation=~"{ops}"}}[{window}])'
    count = f'rate({contract.LUSTRE_CLIENT_OPERATIONS}{{operation=~"{ops}"}}[{window}])'
    return f"sum by ({by}) ({seconds}) / (sum by ({by}) ({count} and on ({by}, operation) {seconds}) > 0)"


def node_gpu_count() -> str:
    """GPUs each node enumerates, answering or lost."""
    return f"count by ({_NODE}) ({contract.GPU_UP})"


def with_aliases(metric: str, matchers: str = "") -> str:
    """``metric`` or, where a target serves only an older name of it (``contract.METRIC_ALIASES``),
    that name: ``(new or old)``, one expression for every exporter version."""
    olds = contract.METRIC_ALIASES.get(metric, ())
    if not olds:
        return f"{metric}{matchers}"
    return "(" + " or ".join(f"{m}{matchers}" for m in (metric, *olds)) + ")"


def clock_event_reasons(matchers: str = "") -> str:
    """The NVML clock-event (throttle) reasons bitmask of each GPU, under either dcgm-exporter name."""
    return with_aliases(contract.DCGM_FI_DEV_CLOCKS_EVENT_REASONS, matchers)


def sum_of_counters(
    metrics: tuple[str, ...], window: str, by: tuple[str, ...], function: str = "rate", matchers: str = ""
) -> str:
    """``rate`` (or ``increase``) of several counters with the same labels, summed ``by`` labels.

    Each counter may be absent (an unsupported field is absent, never 0), so the terms are joined
    with ``or`` after ``label_replace`` makes their label sets distinct; a plain ``a + b`` would drop
    the whole sum when one counter is missing, and ``{__name__=~"a|b"}`` would collide once
    ``rate`` drops the names. ``matchers`` (``{Hostname=~"$Hostname"}``) applies to every counter.
    """
    terms = " or ".join(
        f'label_replace({function}({m}{matchers}[{window}]), "counter", "{m}", "", "")' for m in metrics
    )
    return f"sum by ({', '.join(by)}) ({terms})"


# --------------------------------------------------------------------------------------------
# fleet identity: which (node, job, served model) rows the store holds, for the sharded service's
# discovery (fleetscope.service.shard) and the recording rule that evaluates it once for every shard.
# --------------------------------------------------------------------------------------------

#: The series discovery reads: per exporter family whose series the analyzers load, one that every
#: node (rank, replica) of that family writes every scrape and that carries the family's identity
#: labels. Each is a series per GPU, port, file system, rank or replica, never per phase, bucket or
#: counter kind, so discovery touches a few series per node where the analyzers' ~70 metrics
#: touch hundreds. tests/service/test_shard.py checks on every simulator family that they find the
#: same (node, job, model) rows as all the analyzers' metrics.
IDENTITY_METRICS: tuple[str, ...] = (
    # gpu: the exporter writes it for every GPU it knows, 0 for a lost one.
    contract.GPU_UP,
    # neuron (Trainium, Inferentia): one per node, from every neuron-monitor report.
    contract.NEURON_DEVICES,
    # efa: a port counter every EFA driver has (a node whose GPU collector fails is still found).
    contract.EFA_TX_PKTS,
    # lustre: one per mounted file system, written with every client's stats.
    contract.LUSTRE_CLIENT_READ_BYTES,
    # training: every rank file the exporter accepts ends with it (its completeness mark).
    contract.TRAINING_INFO,
    # nccl_ras: one per job on the node that serves its RAS answer.
    contract.NCCL_RAS_UP,
    # vllm: one per replica (V1: per engine), in both engine generations.
    contract.VLLM_NUM_REQUESTS_RUNNING,
)
#: The labels a discovery row keeps.
IDENTITY_LABELS: tuple[str, ...] = (contract.NODE_LABEL, contract.JOB_LABEL, contract.SERVED_MODEL_LABEL)


def fleet_identity(window: str, metrics: tuple[str, ...] | list[str] = IDENTITY_METRICS) -> str:
    """One series per (node, job, served model) that wrote one of ``metrics`` in the ``window``
    before (value 1): ``group by`` over the identity series, whose answer grows with the fleet's
    nodes, jobs and replicas, not its series."""
    names = "|".join(sorted(set(metrics)))
    return f'group by ({", ".join(IDENTITY_LABELS)}) (last_over_time({{__name__=~"{names}"}}[{window}]))'


def recorded_fleet_identity(record: str, window: str) -> str:
    """:func:`fleet_identity` read from its recording rule's series ``record``: the rows recorded in
    the ``window`` before. ``group by`` folds the copies a store may hold (an HA pair's ``replica``
    label, a Thanos ``prometheus`` label) into one row."""
    return f"group by ({', '.join(IDENTITY_LABELS)}) (last_over_time({record}[{window}]))"


# --------------------------------------------------------------------------------------------
# training: per-rank views of the training_* series (fleetscope.telemetry). MFU per rank and per
# job are rank_mfu() and job_mfu() in the rules section above.
# --------------------------------------------------------------------------------------------


def rank_tokens_per_second(window: str = "5m") -> str:
    """Tokens per second of each rank."""
    return f"rate({contract.TRAINING_TOKENS}[{window}])"


def rank_step_seconds(window: str = "5m") -> str:
    """Mean step time of each rank in seconds; absent (not NaN) while the rank completes no step."""
    return (
        f"rate({contract.TRAINING_STEP_SECONDS}[{window}]) / (rate({contract.TRAINING_STEPS}[{window}]) > 0)"
    )


def rank_compute_seconds_per_step(window: str = "5m") -> str:
    """Forward + backward seconds per step of each rank (what straggler scores compare)."""
    phases = _phase_regex(contract.COMPUTE_PHASES)
    compute = f'sum without (phase) (rate({contract.TRAINING_PHASE_SECONDS}{{phase=~"{phases}"}}[{window}]))'
    return f"{compute} / (rate({contract.TRAINING_STEPS}[{window}]) > 0)"


# --------------------------------------------------------------------------------------------
# inference: serving engines (vLLM, TGI, Triton) and the join of a replica to its GPUs and node.
# Every per-engine term is label_replace'd with ``server`` and, for vLLM, ``model`` (from
# ``model_name``), so the engines' terms union with ``or`` and sum by model without colliding.
# vLLM's renamed series are read as ``new or old`` so one expression covers V0 and V1.
# --------------------------------------------------------------------------------------------

_SERVER = contract.INFERENCE_SERVER_LABEL
_MODEL = contract.INFERENCE_MODEL_LABEL


def _tag(expr: str, server: str, model_from: str = "") -> str:
    """``expr`` with ``server="<server>"`` and, when ``model_from`` names a label, ``model`` copied from
    it."""
    out = f'label_replace({expr}, "{_SERVER}", "{server}", "", "")'
    if model_from:
        out = f'label_replace({out}, "{_MODEL}", "$1", "{model_from}", "(.*)")'
    return out


def vllm_either(new: str, old: str, matchers: str = "") -> str:
    """A vLLM series under its V1 name, or its V0 name where a server has only that."""
    return f"({new}{matchers} or {old}{matchers})"


def vllm_kv_cache_usage(matchers: str = "") -> str:
    """KV-cache use (0-1) of each vLLM engine, V0 or V1 spelling."""
    return vllm_either(contract.VLLM_KV_CACHE_USAGE, contract.VLLM_GPU_CACHE_USAGE, matchers)


def vllm_per_replica(expr: str, how: str = "max") -> str:
    """``expr`` (per vLLM engine) per replica: a pod's or target's engines aggregated by ``how``."""
    return f"{how} without ({contract.VLLM_ENGINE_LABEL}) ({expr})"


def vllm_itl_bucket(matchers: str = "") -> str:
    """Inter-token latency buckets, V1 (inter_token_latency) or V0/early V1 (time_per_output_token)."""
    return vllm_either(
        contract.VLLM_INTER_TOKEN_LATENCY.bucket, contract.VLLM_TIME_PER_OUTPUT_TOKEN.bucket, matchers
    )


def histogram_quantile_by(q: float, bucket: str, window: str, by: tuple[str, ...]) -> str:
    """``histogram_quantile`` over ``bucket``'s rate, keeping ``by`` (``le`` is added)."""
    return f"histogram_quantile({q}, sum by ({', '.join(by + ('le',))}) (rate({bucket}[{window}])))"


def le_matcher(seconds: float) -> str:
    """Matcher for the bucket whose upper bound is ``seconds``, whichever way ``le`` is spelled
    (prometheus_client writes ``1.0``, Prometheus 3 normalises to ``1``, Rust writes ``1``)."""
    text = repr(float(seconds))
    short = text.removesuffix(".0")
    return f'le=~"{short}|{text}"'.replace(".", "\\\\.")


def model_requests_rate(window: str = "5m") -> str:
    """Finished requests per second of each served model, all engines."""
    vllm = _tag(
        f"sum by ({_MODEL_NAME}) (rate({contract.VLLM_REQUEST_SUCCESS}[{window}]))", "vllm", _MODEL_NAME
    )
    tgi = _tag(f"sum by ({_MODEL}) (rate({contract.TGI_REQUEST_COUNT}[{window}]))", "tgi")
    triton = _tag(
        f"sum by ({_MODEL}) (rate({contract.TRITON_REQUEST_SUCCESS}[{window}])"
        f" + ignoring (reason) rate({contract.TRITON_REQUEST_FAILURE}[{window}]))",
        "triton",
    )
    return f"sum by ({_MODEL}, {_SERVER}) ({vllm} or {tgi} or {triton})"


_MODEL_NAME = contract.VLLM_LABELS[0]


def model_error_ratio(window: str = "5m") -> str:
    """Failed requests per request of each model: vLLM HTTP 5xx on its OpenAI routes (joined to the
    model through the target), TGI ``tgi_request_failure``, Triton ``nv_inference_request_failure``."""
    http = contract.VLLM_HTTP_REQUESTS
    target = f"{contract.INSTANCE_LABEL}, job"
    model_of_target = f"group by ({target}, {_MODEL_NAME}) ({contract.VLLM_NUM_REQUESTS_RUNNING})"
    total = f'sum by ({target}) (rate({http}{{handler=~"/v1/.*"}}[{window}]))'
    # vLLM's HTTP instrumentator creates the 5xx series at the first 5xx: until then a serving
    # target's error rate is 0, not absent (a healthy replica has an error ratio of 0).
    errors = f'(sum by ({target}) (rate({http}{{handler=~"/v1/.*", status="5xx"}}[{window}])) or 0 * {total})'
    per_model = (
        f"sum by ({_MODEL_NAME}) ({errors} * on ({target}) group_left ({_MODEL_NAME}) {model_of_target}) / "
        f"(sum by ({_MODEL_NAME}) ({total} * on ({target}) group_left ({_MODEL_NAME}) {model_of_target}) > 0)"
    )
    vllm = _tag(per_model, "vllm", _MODEL_NAME)
    tgi = _tag(
        f"sum by ({_MODEL}) (rate({contract.TGI_REQUEST_FAILURE}[{window}]))"
        f" / (sum by ({_MODEL}) (rate({contract.TGI_REQUEST_COUNT}[{window}])) > 0)",
        "tgi",
    )
    fail = f"sum by ({_MODEL}) (rate({contract.TRITON_REQUEST_FAILURE}[{window}]))"
    ok = f"sum by ({_MODEL}) (rate({contract.TRITON_REQUEST_SUCCESS}[{window}]))"
    triton = _tag(f"{fail} / (({fail} + {ok}) > 0)", "triton")
    return f"max by ({_MODEL}, {_SERVER}) ({vllm} or {tgi} or {triton})"


def vllm_slow_ratio(bucket_expr: str, count_expr: str, seconds: float, window: str = "5m") -> str:
    """Fraction of vLLM observations slower than ``seconds`` per model (1 - bucket{le}/count).
    ``seconds`` must be one of the histogram's bucket bounds."""
    good = f"sum by ({_MODEL_NAME}) (rate({bucket_expr}[{window}]))"
    total = f"sum by ({_MODEL_NAME}) (rate({count_expr}[{window}]))"
    return _tag(f"1 - {good} / ({total} > 0)", "vllm", _MODEL_NAME)


def vllm_ttft_slow_ratio(seconds: float, window: str = "5m") -> str:
    """Share of requests whose time to first token exceeds ``seconds`` (a vLLM TTFT bucket bound)."""
    h = contract.VLLM_TIME_TO_FIRST_TOKEN
    return vllm_slow_ratio(f"{h.bucket}{{{le_matcher(seconds)}}}", h.observations, seconds, window)


def vllm_itl_slow_ratio(seconds: float, window: str = "5m") -> str:
    """Share of inter-token gaps longer than ``seconds`` (a vLLM ITL/TPOT bucket bound), V0 or V1."""
    new, old = contract.VLLM_INTER_TOKEN_LATENCY, contract.VLLM_TIME_PER_OUTPUT_TOKEN
    m = f"{{{le_matcher(seconds)}}}"
    # rate() needs a selector, not a parenthesised `or`: take each spelling's rate, then `or` them.
    good = f"sum by ({_MODEL_NAME}) (rate({new.bucket}{m}[{window}]) or rate({old.bucket}{m}[{window}]))"
    total = (
        f"sum by ({_MODEL_NAME}) (rate({new.observations}[{window}]) or rate({old.observations}[{window}]))"
    )
    return _tag(f"1 - {good} / ({total} > 0)", "vllm", _MODEL_NAME)


# The join of a serving replica to the GPUs and node it runs on.


def instance_hostname(expr: str) -> str:
    """``expr`` with ``Hostname`` set from the host part of ``instance`` (Slurm/EC2 static targets:
    ``node-7:8000`` -> ``node-7``; an IPv6 ``[::1]:8000`` keeps its brackets off)."""
    return (
        f'label_replace({expr}, "{_NODE}", "$1", "{contract.INSTANCE_LABEL}", '
        '"\\\\[?([^\\\\]]+?)\\\\]?(?::[0-9]+)?")'
    )


#: Kubernetes pod identity is (namespace, pod), and only a non-empty one identifies anything: a
#: series without the labels reads them as "" and "" equals "" in a join, so without these
#: matchers every pod-less GPU would be attributed to every pod-less (statically scraped) replica.
_POD_ON = ", ".join(contract.K8S_POD_JOIN_LABELS)
_HAS_POD = ", ".join(f'{k}!=""' for k in contract.K8S_POD_JOIN_LABELS)
_NO_POD = f'{contract.K8S_POD_JOIN_LABELS[-1]}=""'


def _sel(metric: str, *matchers: str) -> str:
    """``metric{m1, m2}`` with the empty matchers left out (``metric`` alone when none is left)."""
    inner = ", ".join(m for m in matchers if m)
    return f"{metric}{{{inner}}}" if inner else metric


def one_model_per(on: str, rows: str, chosen: str = "") -> str:
    """``rows`` (one series per ``on`` labels and ``model_name``) less the ``on`` groups that hold
    more than one model, narrowed to the groups ``chosen`` (a series with ``on`` and ``model_name``)
    has when it is given.

    The right side of a ``group_left`` join must hold one series per match group: one duplicate
    fails the whole query ("found duplicate series for the match group"), so a pod or node that
    reports two models (two engines in one pod, two pod-less replicas of different models on one
    node, a model swapped within the lookback) would blank every panel that joins. Such a group
    joins nothing instead, as its GPUs cannot be told apart. The ambiguity is judged before
    ``chosen`` narrows, so picking one of the models does not hand it the other's GPUs.
    """
    unique = f"({rows} unless on ({on}) (count by ({on}) ({rows}) > 1))"
    return f"({unique} and on ({on}, {_MODEL_NAME}) {chosen})" if chosen else unique


def serving_pods(matchers: str = "") -> str:
    """One series per serving pod (non-empty namespace and pod) with its ``model_name``; ``matchers``
    (``model_name=~"$model"``) narrow the pods."""
    running = contract.VLLM_NUM_REQUESTS_RUNNING
    rows = f"group by ({_POD_ON}, {_MODEL_NAME}) ({_sel(running, _HAS_POD)})"
    return one_model_per(_POD_ON, rows, _sel(running, _HAS_POD, matchers) if matchers else "")


def replica_gpus_k8s(gpu_metric: str, gpu_matchers: str = "", serving_matchers: str = "") -> str:
    """A DCGM GPU series restricted to serving pods' GPUs, joined on (namespace, pod): the
    exporter's attribution labels on the GPU side, the scrape's target labels on the serving side.
    Only a non-empty pod identity joins, and a pod with two models joins nothing
    (:func:`one_model_per`), so the query never fails on duplicates."""
    gpus = _sel(gpu_metric, _HAS_POD, gpu_matchers)
    return f"{gpus} * on ({_POD_ON}) group_left ({_MODEL_NAME}) {serving_pods(serving_matchers)}"


def replica_node_of(expr: str) -> str:
    """``expr`` (series of serving replicas: a pod's or a ``host:port`` target's labels) with
    ``Hostname`` set to the name of the node the replica runs on: a pod's from its GPUs
    (dcgm-exporter attributes them to the pod and labels them with the node's name; a pod's own
    ``instance`` is its IP), else the host part of ``instance`` (Slurm/EC2 targets are named by
    their host)."""
    gpu_node = f"group by ({_POD_ON}, {_NODE}) ({_sel(contract.DCGM_FI_DEV_GPU_UTIL, _HAS_POD)})"
    joined = f"({expr}) * on ({_POD_ON}) group_left ({_NODE}) {gpu_node}"
    rest = instance_hostname(f"(({expr}) unless on ({_POD_ON}) {gpu_node})")
    return f"({joined}) or {rest}"


#: The label :func:`replica_named` gives a serving replica's series: its pod, else its target.
REPLICA_LABEL = "replica"


def replica_named(expr: str) -> str:
    """``expr`` with ``replica`` set to the pod's name, else (a pod-less target) its ``instance``,
    and ``Hostname`` to its node's name (:func:`replica_node_of`): what an alert names."""
    by_instance = f'label_replace({expr}, "{REPLICA_LABEL}", "$1", "{contract.INSTANCE_LABEL}", "(.*)")'
    by_pod = (
        f'label_replace({by_instance}, "{REPLICA_LABEL}", "$1", "{contract.K8S_POD_JOIN_LABELS[-1]}", "(.+)")'
    )
    return replica_node_of(by_pod)


def replica_nodes(matchers: str = "") -> str:
    """The pod-less vLLM replicas (Slurm/EC2 ``host:port`` targets) with ``Hostname`` from ``instance``."""
    return instance_hostname(_sel(contract.VLLM_NUM_REQUESTS_RUNNING, _NO_POD, matchers))


def serving_nodes(matchers: str = "", source: Callable[[str], str] = replica_nodes) -> str:
    """One series per node that runs pod-less replicas of one model, with that ``model_name``.
    ``source(matchers)`` gives replicas with ``Hostname`` (:func:`replica_nodes`, or the recorded
    ``instance:inference_replica_node:group`` the dashboards read)."""
    rows = f"group by ({_NODE}, {_MODEL_NAME}) ({source('')})"
    return one_model_per(_NODE, rows, source(matchers) if matchers else "")


def replica_gpus_host(
    gpu_metric: str,
    gpu_matchers: str = "",
    serving_matchers: str = "",
    source: Callable[[str], str] = replica_nodes,
) -> str:
    """A DCGM GPU series of the nodes that run a pod-less vLLM replica, joined on ``Hostname`` (every
    GPU of the node is the replica's; a node with replicas of two models joins nothing)."""
    gpus = _sel(gpu_metric, gpu_matchers)
    return f"{gpus} * on ({_NODE}) group_left ({_MODEL_NAME}) {serving_nodes(serving_matchers, source)}"


def replica_gpus(
    gpu_metric: str,
    gpu_matchers: str = "",
    pod_matchers: str = "",
    node_matchers: str = "",
    source: Callable[[str], str] = replica_nodes,
) -> str:
    """The GPUs serving replicas run on, with their ``model_name``: pods' GPUs on (namespace, pod)
    (:func:`replica_gpus_k8s`), and the rest on the node (:func:`replica_gpus_host`), leaving out
    GPUs attributed to a serving pod so that no GPU is counted for two models. ``pod_matchers``
    narrow the pods (``pod=~"$replica"``), ``node_matchers`` the host-side replicas
    (``instance=~"$replica"``)."""
    k8s = replica_gpus_k8s(gpu_metric, gpu_matchers, pod_matchers)
    pods = _sel(contract.VLLM_NUM_REQUESTS_RUNNING, _HAS_POD)
    rest = f"({_sel(gpu_metric, gpu_matchers)} unless on ({_POD_ON}) {pods})"
    host = f"{rest} * on ({_NODE}) group_left ({_MODEL_NAME}) {serving_nodes(node_matchers, source)}"
    return f"({k8s} or {host})"
