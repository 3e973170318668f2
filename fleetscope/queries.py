"""Canonical PromQL expressions built from the contract's names.

The recording rules, the dashboards, the analyzers and the tests use these builders, so one
expression (MFU, tokens/s, compute time, retransmit ratio, ...) is written once. Each section is a
plain function returning a PromQL string; keep them free of dashboard variables unless the
function says so.
"""

from __future__ import annotations

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
    return f"rate({contract.TRAINING_MODEL_FLOPS}[{window}]) / on ({_NODE}, gpu) group_left () {_gpu_peak(dtype)}"


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
