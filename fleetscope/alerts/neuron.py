"""AWS Trainium and Inferentia alerts: uncorrectable ECC, hardware execution errors, a vanished
Neuron device (failing node); corrected ECC piling up and failing executions (degradation).

They read the neuron collector's series, which keep the names of AWS's neuron-monitor-prometheus.py
(docs/neuron.md), so they also work on series scraped from that script once the node label is
added by relabelling. A neuron-monitor that stops reporting is ``FleetscopeCollectorFailing``
with ``collector="neuron"`` (stack.py).
"""

from __future__ import annotations

from fleetscope import contract as c
from fleetscope.alerts.config import Thresholds
from fleetscope.alerts.model import Alert, Case, Fire, Group, InputSeries, Labels
from fleetscope.alerts.testdata import HOST

#: Corrected ECC events (DRAM + SRAM) of one Neuron device in ``event_window`` above which the
#: device is degrading. A healthy device corrects a handful a day at most; dozens within minutes
#: is memory wearing out, a ticket before it turns uncorrectable (judgment, the GPU side's
#: rising-SBE reasoning: docs/design.md#thresholds).
CORRECTED_ECC_PER_WINDOW = 10.0

_INSTANCE = "i-0a1b2c3d4e5f60002"
_DEVICE_KEYS = (c.NODE_LABEL, "instance_id", "neuron_device_index")
_RUNTIME_KEYS = (c.NODE_LABEL, "instance_id", "runtime_tag")


def _device_labels(device: str = "3") -> Labels:
    return {c.NODE_LABEL: HOST, "instance_id": _INSTANCE, "neuron_device_index": device}


def _runtime_labels() -> Labels:
    return {c.NODE_LABEL: HOST, "instance_id": _INSTANCE, "runtime_tag": "llama-0"}


def _ecc(event: str, values: str, device: str = "3") -> InputSeries:
    labels = {**_device_labels(device), "instance_type": "trn2.48xlarge", "event_type": event}
    return InputSeries(c.NEURON_HW_ECC_EVENTS, labels, values)


def _runtime(metric: str, values: str, **extra: str) -> InputSeries:
    return InputSeries(metric, {**_runtime_labels(), "instance_type": "trn2.48xlarge", **extra}, values)


def _events(types: tuple[str, ...], window: str) -> str:
    sel = f'{c.NEURON_HW_ECC_EVENTS}{{event_type=~"{"|".join(types)}"}}'
    return f"sum by ({', '.join(_DEVICE_KEYS)}) (increase({sel}[{window}]))"


def group(cfg: Thresholds) -> Group:
    w, rw, hist = cfg.event_window, cfg.rate_window, cfg.gpu_history_window
    corrected = tuple(t for t in c.NEURON_ECC_EVENT_TYPES if t not in c.NEURON_ECC_UNCORRECTED)
    hw_errors = "|".join(c.NEURON_HARDWARE_ERROR_TYPES)
    failed = f'{c.NEURON_EXECUTION_STATUS}{{status_type!="completed"}}'
    devices = f"max by ({c.NODE_LABEL}) ({c.NEURON_DEVICES})"
    dev = _device_labels()
    rt = _runtime_labels()
    desc_dev = (
        "Neuron device {{ $labels.neuron_device_index }} of {{ $labels.Hostname }} "
        "({{ $labels.instance_id }})"
    )
    alerts = (
        Alert(
            name="FleetscopeNeuronEccUncorrectable",
            expr=f"{_events(c.NEURON_ECC_UNCORRECTED, w)} > 0",
            severity="critical",
            summary="A Neuron device had uncorrectable ECC errors: drain its node.",
            description=f'{desc_dev} counted {{{{ printf "%.0f" $value }}}} uncorrectable DRAM/SRAM ECC '
            f"events in {w}; data on the device was lost.",
            cases=(
                Case(
                    "one uncorrected SRAM event",
                    (_ecc("sram_ecc_uncorrected", "0x10 1 1"), _ecc("mem_ecc_uncorrected", "0x12")),
                    "12m",
                    (Fire(dev, 1),),
                ),
                Case(
                    "corrected events only, and an old uncorrected one",
                    (_ecc("mem_ecc_corrected", "0 2 4 6 8 10 12"), _ecc("mem_ecc_uncorrected", "1x20", "5")),
                    "20m",
                ),
            ),
        ),
        Alert(
            name="FleetscopeNeuronHardwareExecutionErrors",
            expr=f"sum by ({', '.join(_RUNTIME_KEYS)}) "
            f'(increase({c.NEURON_EXECUTION_ERRORS}{{error_type=~"{hw_errors}"}}[{w}])) > 0',
            severity="critical",
            summary="The Neuron Runtime reports hardware execution errors: drain the node.",
            description="The Neuron application {{ $labels.runtime_tag }} on {{ $labels.Hostname }} "
            f'({{{{ $labels.instance_id }}}}) hit {{{{ printf "%.0f" $value }}}} hardware errors in {w} '
            "(uncorrectable ECC or a device fault, as the runtime classifies them).",
            cases=(
                Case(
                    "two hardware errors",
                    (_runtime(c.NEURON_EXECUTION_ERRORS, "0x10 2 2", error_type="hardware"),),
                    "12m",
                    (Fire(rt, 2),),
                ),
                Case(
                    "numerical errors are the model's",
                    (_runtime(c.NEURON_EXECUTION_ERRORS, "0 3 6 9 12 15", error_type="numerical"),),
                    "5m",
                ),
            ),
        ),
        Alert(
            name="FleetscopeNeuronDeviceMissing",
            expr=f"{devices} < max by ({c.NODE_LABEL}) (max_over_time({c.NEURON_DEVICES}[{hist}]))",
            for_="5m",
            severity="critical",
            summary="A node lists fewer Neuron devices than it had.",
            description='{{ $labels.Hostname }} lists {{ printf "%.0f" $value }} Neuron devices, fewer than '
            f"in the last {hist}.",
            cases=(
                Case(
                    "device 15 vanished",
                    (InputSeries(c.NEURON_DEVICES, {c.NODE_LABEL: HOST}, "16 16 16 15x11"),),
                    "14m",
                    (Fire({c.NODE_LABEL: HOST}, 15),),
                ),
                Case("all there", (InputSeries(c.NEURON_DEVICES, {c.NODE_LABEL: HOST}, "16x12"),), "12m"),
            ),
        ),
        Alert(
            name="FleetscopeNeuronEccCorrectableRising",
            expr=f"{_events(corrected, w)} > {CORRECTED_ECC_PER_WINDOW:g}",
            severity="warning",
            summary="A Neuron device corrects ECC errors at a rising rate: plan its replacement.",
            description=f'{desc_dev} corrected {{{{ printf "%.0f" $value }}}} ECC events in {w}.',
            cases=(
                Case(
                    "30 corrected in 10 minutes",
                    (_ecc("mem_ecc_corrected", "0x5 0+6x6"),),
                    "11m",
                    (Fire(dev, 30),),
                ),
                Case("a few", (_ecc("sram_ecc_corrected", "0x5 1 2 3 3 3 3"),), "11m"),
            ),
        ),
        Alert(
            name="FleetscopeNeuronExecutionFailures",
            expr=f"sum by ({', '.join(_RUNTIME_KEYS)}) (rate({failed}[{rw}])) > 0",
            for_="10m",
            severity="warning",
            summary="Executions on a Neuron node keep failing (errors, timeouts, rejected requests).",
            description="The Neuron application {{ $labels.runtime_tag }} on {{ $labels.Hostname }} has "
            'failed {{ printf "%.3f" $value }} executions per second for 10m.',
            cases=(
                Case(
                    "timeouts every minute",
                    (
                        _runtime(c.NEURON_EXECUTION_STATUS, "0+6x20", status_type="timed_out"),
                        _runtime(c.NEURON_EXECUTION_STATUS, "0+600x20", status_type="completed"),
                    ),
                    "20m",
                    (Fire(rt, 0.1),),
                ),
                Case(
                    "completed only",
                    (_runtime(c.NEURON_EXECUTION_STATUS, "0+600x20", status_type="completed"),),
                    "20m",
                ),
            ),
        ),
    )
    return Group("neuron", alerts)
