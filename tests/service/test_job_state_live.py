"""A job's state on the page, cycle by cycle, on a real Prometheus holding the demo's GPU loss (issue 33).

The demo (``fleetscope demo``: 4 nodes, seed 1) loses GPU 3 of node 1 90 s after the start: its rank
dies, the others hang in NCCL until the job restarts 240 s later without the node. Before this, the
job's row said "running" for cycles after the loss (the stall threshold was a multiple of a step
time that the stall itself stretched) and flipped back to "running" for a cycle mid-stall. Every
15 s the service's own analysis (:class:`~fleetscope.service.live.LiveAnalysis` on a sliding
Prometheus source) runs once; the job must read running until the stall is provable (no step for
its typical step, measured before the stall, plus half of it and two grid steps), stalled since the
stall's first grid time from then on every cycle until steps resume, and running from then on, through the
45-second blocking checkpoint after the restart. Every finding that says the job stalls now names
the same time.
"""

from __future__ import annotations

import pytest

from fleetscope.analyzers.core import LOADED
from fleetscope.analyzers.features import fmt_time
from fleetscope.service.live import LiveAnalysis
from fleetscope.simulate.spec import FaultSpec, ScenarioSpec
from fleetscope.times import parse_rfc3339
from fleetscope.window.prometheus import PrometheusAccess
from fleetscope.window.sources import PrometheusSource
from tests.support.prom import scenario_prometheus

pytestmark = [pytest.mark.server]

STEP, ONSET, RESTART_S = 15.0, 90.0, 240.0
#: The demo's training fault (fleetscope/demo/cli.py: --fault gpu_lost --fault-at 90 on node 1, GPU 3).
DEMO = ScenarioSpec(
    name="demo_gpu_lost",
    nodes=4,
    seed=1,
    duration_s=720,
    faults=[FaultSpec(kind="gpu_lost", at_s=ONSET, node=1, gpu=3, stall_s=RESTART_S)],
)


@pytest.fixture(scope="module")
def cycles(tmp_path_factory):
    """(cycle time after the start, the job's entry, the open findings, the job's typical step at
    the window's end) for a cycle every 15 s from 45 s to 705 s."""
    out = []
    with scenario_prometheus(tmp_path_factory.mktemp("demo"), DEMO) as (p, start, _):
        source = PrometheusSource(PrometheusAccess(p.url, timeout=30), LOADED, sliding=True)
        live = LiveAnalysis(source, None, STEP)
        t = start + 45
        while t <= start + 705:
            res = live(max(start, t - 1800), t)
            ((job_id, job),) = res.jobs.items()
            signals = res.report.signals
            assert signals is not None
            typical = float(signals.job_states(job_id).typical_step_s[-1])
            out.append((t - start, dict(job), [f for f in res.report.findings if f.end is None], typical))
            t += STEP
    return start, out


def test_stalled_from_the_first_provable_cycle_until_steps_resume_with_no_flip(cycles):
    start, seen = cycles
    states = [(round(t), j["state"]) for t, j, _, _ in seen]
    # The last step before the loss: its grid time is the stall's "since" (the hang finding's start).
    stalled = [(t, j) for t, j, _, _ in seen if j["state"] == "stalled"]
    assert stalled, states
    first, last = stalled[0][0], stalled[-1][0]
    since = {j["since"] for _, j in stalled}
    assert len(since) == 1, since  # one stall, one since, on every cycle
    since_s = (parse_rfc3339(since.pop()) or 0.0) - start
    assert ONSET - STEP <= since_s <= ONSET + STEP, since_s
    # Provable within 1.5 typical steps + two grid steps (+ one grid step of alignment) after it began.
    typical = max(ty for t, _, _, ty in seen if t < ONSET)
    assert 0 < typical < STEP, typical
    assert first <= since_s + 1.5 * typical + 3 * STEP, states
    # Contiguous: no cycle in the stall reads anything else, and before it only running.
    assert all(s == "stalled" for t, s in states if first <= t <= last), states
    assert all(s == "running" for t, s in states if t < first), states
    # Steps resume at the restart (240 s after the loss, plus the warm-up): running from then on,
    # through the blocking checkpoint that follows (counted as pause time when it ends).
    assert ONSET + RESTART_S - STEP <= last <= ONSET + RESTART_S + 4 * STEP, states
    after = [s for t, s in states if t > last]
    assert len(after) >= 15 and set(after) == {"running"}, states
    # While stalled, the page says no MFU and why; the stall never stretches the typical step.
    for t, j, _, ty in seen:
        if first <= t <= last:
            assert j["mfu"] is None and j["mfu_reason"] == "no step completes while the job is stalled"
            assert ty == pytest.approx(typical, abs=1.0), (t, ty)


def test_every_finding_that_says_the_job_stalls_names_the_state_and_its_since(cycles):
    _, seen = cycles
    said = 0
    for t, job, findings, _ in seen:
        for f in findings:
            texts = [v for k, v in f.evidence.items() if k in ("hang", "training", "no_progress")]
            ongoing = [v for v in texts if "(ongoing)" in v or "stopped reporting when the job stalled" in v]
            if f.kind == "job_hang" or any("(ongoing)" in v for v in texts):
                said += 1
                assert job["state"] == "stalled", (t, job, f.evidence)
                since = parse_rfc3339(job["since"])
                assert since is not None and any(fmt_time(since) in v for v in ongoing), (t, job, f.evidence)
    assert said >= 5  # the findings did speak of the stall on several cycles
