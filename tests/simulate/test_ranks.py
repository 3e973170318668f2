"""The simulator's training series are what the library's rank file holds, read by the exporter."""

from __future__ import annotations

from fleetscope import contract as c
from fleetscope.exporters.training import parse_rank_file
from fleetscope.simulate.families import cluster_model
from fleetscope.simulate.spec import FaultSpec, ScenarioSpec
from fleetscope.telemetry.writer import render


def test_series_are_the_rank_files_the_exporter_reads():
    spec = ScenarioSpec(
        name="ranks",
        family="realistic",
        nodes=2,
        seed=5,
        duration_s=900,
        checkpoint_every_s=200,
        eval_every_s=300,
        eval_s=40,
        emit_layout=True,
        faults=[FaultSpec(kind="hang", cause="xid79", at_s=400, stall_s=60, node=1, gpu=2, restart="same")],
    )
    model = cluster_model(spec, scrape_labels=False)
    for _ in range(50):  # 750 s: saves, evaluations, the hang, the abort, the restart and its load
        model.tick(15.0)
    job = model.jobs[0]
    assert job.attempt == 1
    series = model.series()
    for rank in (0, 13):
        monitor = job.mons[rank]
        _header, labels, samples = parse_rank_file(
            render(monitor.identity, monitor.snapshot(), "palm", {"pid": "1"})
        )
        assert labels["rank"] == str(rank)
        got = {}
        for name, s in series.items():
            if not name.startswith("training_"):
                continue
            for key, value in zip(s.keys, s.values, strict=True):
                row = dict(zip(s.labels, key, strict=True))
                if row["rank"] == str(rank):
                    extra = tuple(
                        row.get(k, "") for k in c.METRICS[name].labels if k not in c.TRAINING_LABELS
                    )
                    got[(name, extra)] = value
        want = {(name, extra): value for name, extra, value in samples}
        assert set(got) == set(want)
        for k, v in want.items():
            assert abs(got[k] - v) <= 1e-6 * max(1.0, abs(v)), k
        assert want[(c.TRAINING_RESTART_ATTEMPT, ())] == 1
        assert want[(c.TRAINING_RESUMED_FROM_STEP, ())] > 0
