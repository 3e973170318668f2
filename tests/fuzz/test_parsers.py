"""Property-based fuzzing of every parser of outside input (Hypothesis, derandomized, bounded).

Each parser gets arbitrary and near-valid input; what may come out is its documented result or its
documented error (``FleetscopeError``, the training exporter's ``Rejected``), never another exception,
and a bad file never costs another collector or device its data. ``derandomize=True`` makes every CI
run try the same examples; the budgets keep the whole module to a few seconds.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetscope.errors import FleetscopeError
from fleetscope.exporters.base import NodeContext
from fleetscope.exporters.efa import EfaCollector
from fleetscope.exporters.lprocfs import Stats, parse_stats
from fleetscope.exporters.training import Rejected, parse_rank_file
from fleetscope.exporters.webconfig import load_web_config
from fleetscope.simulate.spec import ScenarioSpec
from fleetscope.window.openmetrics import read_openmetrics
from fleetscope.window.prometheus import decode_matrix

pytestmark = [pytest.mark.slow]

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
FUZZ = settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

#: Text made of the characters parsers split on, so examples get past the first check.
_syntax = st.text(alphabet=st.sampled_from(list('abc_xyz019 .-+eE{}=",#\n\t:\\/NaInf')), max_size=400)
_text = st.one_of(st.text(max_size=300), _syntax)


@FUZZ
@given(_text)
def test_lprocfs_stats_never_raise(text):
    stats = parse_stats(text)
    assert isinstance(stats, Stats)


_RANK_OK = '# fleetscope-rank v1 pid=1 starttime=1\ntraining_steps_total{job_id="j",rank="0"} 3\n'


@FUZZ
@given(
    st.one_of(
        _text, st.builds(lambda a, b: _RANK_OK[:a] + b + _RANK_OK[a:], st.integers(0, len(_RANK_OK)), _syntax)
    )
)
def test_rank_files_parse_or_are_rejected(text):
    try:
        header, labels, samples = parse_rank_file(text)
    except Rejected:
        return
    assert isinstance(header, dict) and isinstance(labels, dict)
    assert all(np.isfinite(v) or np.isnan(v) or np.isinf(v) for _, _, v in samples)


_LINE = 'DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="n1"} 50 1796000000\n'


@FUZZ
@given(
    st.lists(
        st.one_of(
            st.just(_LINE),
            _syntax,
            st.builds(
                lambda v, t: f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",Hostname="n1"}} {v} {t}\n',
                st.sampled_from(["1", "NaN", "+Inf", "-1e308", "x"]),
                st.sampled_from(["1796000015", "0", "1e300", "NaN", "-Inf", "4e9"]),
            ),
        ),
        max_size=30,
    ),
    st.booleans(),
)
def test_openmetrics_recordings_load_or_fail_clearly(lines, eof):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "r.om"
        path.write_text("".join(lines) + ("# EOF\n" if eof else ""))
        try:
            raw, t0, t1, _ = read_openmetrics(path)
        except FleetscopeError:
            return
    assert np.isfinite(t0) and np.isfinite(t1) and t1 - t0 < 10 * 86400
    for series in raw.values():
        for s in series:
            assert np.isfinite(s.times).all() and np.isfinite(s.values).all()


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
_MATRIX = (
    b'{"status":"success","data":{"resultType":"matrix",'
    b'"result":[{"metric":{"a":"b"},"values":[[1,"2"],[2,"NaN"]]}]}}'
)


@FUZZ
@given(
    st.one_of(
        _json.map(lambda d: json.dumps(d).encode()),
        st.builds(
            lambda a, b: _MATRIX[:a] + b + _MATRIX[a:], st.integers(0, len(_MATRIX)), st.binary(max_size=20)
        ),
        st.binary(max_size=200),
    )
)
def test_prometheus_answers_decode_or_raise_the_documented_errors(body):
    try:
        _, series = decode_matrix(body)
    except (ValueError, TypeError, IndexError, AttributeError):  # the errors query_range turns into one line
        return
    for labels, t, v in series:
        assert isinstance(labels, dict) and t.shape == v.shape


@settings(FUZZ, max_examples=60)
@given(st.one_of(_json.map(json.dumps), _text))
def test_web_configs_load_or_fail_clearly(text):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "web.yml"
        path.write_text(text)
        try:
            load_web_config(path)
        except FleetscopeError:
            pass


_spec_fields = st.fixed_dictionaries(
    {},
    optional={
        "nodes": _json,
        "gpus_per_node": _json,
        "duration_s": _json,
        "step_s": _json,
        "seed": _json,
        "family": _json,
        "faults": _json,
        "jobs": _json,
        "name": _json,
    },
)


@settings(FUZZ, max_examples=60)
@given(st.one_of(_spec_fields, _json))
def test_scenario_specs_load_or_fail_clearly(data):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s.json"
        path.write_text(json.dumps(data))
        try:
            ScenarioSpec.load(path)
        except FleetscopeError:
            pass


_EFA_TREE: list[Path] = []


def _efa_tree() -> Path:
    if not _EFA_TREE:
        root = Path(tempfile.mkdtemp(prefix="fuzz-efa-"))
        shutil.copytree(FIXTURES / "p5" / "sys", root / "sys", symlinks=True)
        _EFA_TREE.append(root / "sys")
    return _EFA_TREE[0]


def _efa_samples(sysfs: Path) -> list:
    collector = EfaCollector(NodeContext(sysfs=sysfs, node_name="n"))
    try:
        return [
            (s.name, tuple(sorted(s.labels.items())), s.value) for f in collector.collect() for s in f.samples
        ]
    finally:
        collector.close()


@settings(FUZZ, max_examples=60)
@given(st.binary(max_size=64))
def test_a_bad_efa_counter_file_costs_no_other_counter(content):
    sysfs = _efa_tree()
    victim = sysfs / "class" / "infiniband" / "rdmap198s0" / "hw_counters" / "alloc_pd_err"
    victim.write_bytes(b"0\n")
    baseline = {(n, labels) for n, labels, _ in _efa_samples(sysfs)}
    victim.write_bytes(content)
    after = {(n, labels) for n, labels, _ in _efa_samples(sysfs)}
    lost = baseline - after
    assert all(
        n.startswith("efa_alloc_pd_err") and ("device", "rdmap198s0") in labels for n, labels in lost
    ), lost
    assert len(baseline) > 100
