"""The recording reader's second pass at issue 32's floor: the head read once (the window's length is
judged from the first family, and a one-piece load reads on from there), the buffers parsed in
place, and the small pieces of the bulk parse (the run's likely end, the spans of the pairs, the
millisecond test, a label set's grid key) each equal to what they replace."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from fleetscope.errors import FleetscopeError
from fleetscope.window import frames as fr
from fleetscope.window import openmetrics as om
from fleetscope.window import pairs
from fleetscope.window.sources import RecordingSource
from tests.support.reads import assert_same_reads, reference_read

T0 = 1796032800


def _recording(families: int = 3, gpus: int = 6, samples: int = 90, odd: bool = False) -> bytes:
    """Families of GPUs' series; ``odd``: runs of different lengths (a GPU's series shorter)."""
    out = []
    for f in range(families):
        name = f"DCGM_FI_DEV_F{f}"
        out.append(f"# TYPE {name} gauge\n# HELP {name} a gauge.\n")
        for g in range(gpus):
            head = f'{name}{{gpu="{g}",Hostname="node-0",modelName="NVIDIA H100 80GB HBM3"}}'
            n = samples - (7 * g if odd else 0)
            out += [f"{head} {(g * 3 + t) % 17}.5 {T0 + 15 * t + 30 * g}\n" for t in range(n)]
    out.append("# EOF\n")
    return "".join(out).encode()


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(om, "CHUNK_BYTES", 3000)  # the head ends inside a chunk, lines cut in two


@pytest.mark.parametrize("odd", [False, True])
def test_a_read_paused_after_its_head_reads_on_to_the_same_series(tmp_path, small_chunks, odd):
    path = tmp_path / "r.om.gz"
    path.write_bytes(gzip.compress(_recording(odd=odd)))
    whole = om.read_openmetrics(path)
    read = om.RecordingRead(path)
    # The first family: GPU g's samples span 15 * (n - 1) s from 30 * g s after T0.
    last = max(30 * g + 15 * (90 - (7 * g if odd else 0) - 1) for g in range(6))
    assert read.first_family_seconds() == last
    assert read.reader.first_family_read() and not read.reader.saw_eof  # stopped at the head
    shares: list[float] = []
    assert_same_reads(read.finish(shares.append), whole)
    assert shares[0] > 0 and shares == sorted(shares) and shares[-1] == 1.0  # on from the head


def test_the_head_of_a_file_of_one_family_or_of_none_the_analyzers_read(tmp_path):
    one = tmp_path / "one.om"
    one.write_bytes(_recording(families=1))
    assert om.RecordingRead(one).first_family_seconds() == 30 * 5 + 15 * 89  # read to '# EOF'
    none = om.RecordingRead(one, metrics=["DCGM_FI_DEV_OTHER"])
    assert none.first_family_seconds() is None
    with pytest.raises(FleetscopeError, match="holds no samples"):  # read_openmetrics' error
        none.finish()


def test_a_source_reads_its_head_once_for_the_window_it_was_judged_for(tmp_path, small_chunks, monkeypatch):
    path = tmp_path / "r.om.gz"
    path.write_bytes(gzip.compress(_recording()))
    fresh = RecordingSource(path, None).load()
    opened: list[Path] = []
    chunks = om._chunks
    monkeypatch.setattr(om, "_chunks", lambda p: (opened.append(p), chunks(p))[1])
    source = RecordingSource(path, None)
    assert source.seconds() == 30 * 5 + 15 * 89
    frames = source.load()
    assert len(opened) == 1  # one pass: the load went on from the head
    assert np.array_equal(frames.times, fresh.times) and list(frames.metrics) == list(fresh.metrics)
    for name, metric in fresh.metrics.items():
        assert np.array_equal(frames.metrics[name].values, metric.values, equal_nan=True)
    # Another window than the one judged: read again; a second load: read again.
    source.seconds()
    source.load(start=T0 + 600)
    source.load()
    assert len(opened) == 4


def test_a_head_that_does_not_parse_is_no_length_and_the_load_says_why(tmp_path, small_chunks):
    path = tmp_path / "bad.om"
    body = _recording().replace(
        b"# TYPE DCGM_FI_DEV_F2", b"DCGM_FI_DEV_F1{gpu=} 1 2\n# TYPE DCGM_FI_DEV_F2", 1
    )
    path.write_bytes(body)
    source = RecordingSource(path, None)
    assert source.seconds() == 30 * 5 + 15 * 89  # its family ended chunks before the bad line
    with pytest.raises(FleetscopeError, match="malformed labels"):
        source.load()
    path.write_bytes(b"# TYPE a gauge\na{x=} 1 2\n# EOF\n")
    source = RecordingSource(path, None)
    assert source.seconds() is None
    with pytest.raises(FleetscopeError, match="line 2: malformed labels"):
        source.load()


def test_the_likely_run_end_is_the_end_whatever_the_guess():
    lines = [b"a 1 2"] * 5 + [b"b 1 2"] * 3 + [b"c 1 2"] + [b"d 1 2"] * 9
    buf = b"\n".join(lines) + b"\n"
    nls = [i for i, c in enumerate(buf) if c == 10]
    for i, prefix, end in ((0, b"a ", 5), (5, b"b ", 8), (8, b"c ", 9), (9, b"d ", 18)):
        assert [om._run_end(buf, nls, i, prefix, guess) for guess in range(20)] == [end] * 20


def test_runs_of_every_length_and_a_series_back_after_another_read_as_line_by_line(tmp_path, small_chunks):
    """Runs shorter and longer than the one before (the guess wrong both ways), and a series that
    comes back after another (the count finds it, the run is read line by line)."""
    body = _recording(odd=True)
    back = b'DCGM_FI_DEV_F1{gpu="0",Hostname="node-0",modelName="NVIDIA H100 80GB HBM3"}'
    body = body.replace(b"# TYPE DCGM_FI_DEV_F2", back + b" 4 %d\n# TYPE DCGM_FI_DEV_F2" % (T0 + 7), 1)
    path = tmp_path / "r.om"
    path.write_bytes(body)
    assert_same_reads(om.read_openmetrics(path), reference_read(path))


def test_the_pairs_spans_of_runs_in_one_stretch_are_those_of_runs_apart():
    rng = np.random.default_rng(5)
    nl = np.cumsum(rng.integers(20, 60, 200)) + 7
    plens = rng.integers(3, 15, 6)
    counts = np.array([10, 1, 30, 4, 20, 5])
    for first in (0, 12):
        firsts = first + np.concatenate([[0], np.cumsum(counts)[:-1]])  # one stretch of lines
        starts, lens = om._pair_spans(nl, 7, firsts, counts, plens)
        lines = np.concatenate([np.arange(f, f + c) for f, c in zip(firsts, counts, strict=True)])
        begins = np.where(lines > 0, nl[np.maximum(lines - 1, 0)] + 1, 7)
        assert np.array_equal(starts, begins + np.repeat(plens, counts))
        assert np.array_equal(lens, nl[lines] + 1 - starts)
    apart = np.array([0, 15, 50, 90, 100, 140])  # lines between the runs: the line-by-line formula
    starts, lens = om._pair_spans(nl, 7, apart, counts, plens)
    lines = np.concatenate([np.arange(f, f + c) for f, c in zip(apart, counts, strict=True)])
    assert np.array_equal(starts, np.where(lines > 0, nl[lines - 1] + 1, 7) + np.repeat(plens, counts))


@pytest.mark.parametrize(
    "times, ms",
    [
        ([], False),
        ([T0, T0 + 15.0], False),
        ([T0 * 1e3, T0 * 1e3 + 15e3], True),
        ([np.nan, T0 * 1e3], True),
        ([np.nan, T0], False),
        ([-np.inf, T0], False),
        ([np.inf, T0, T0 + 15], False),
        ([T0, T0 * 1e3, T0 * 1e3 + 1], True),  # judged by the bulk
        ([T0, T0 + 1, T0 * 1e3], False),
        ([np.nan, np.nan], False),
        ([2e11, 2e11 + 15e3], True),  # milliseconds of 1976: the rule's bound is 1e11
    ],
)
def test_milliseconds_are_judged_by_the_bulk(times, ms):
    t = np.array(times, dtype=float)
    finite = t[np.isfinite(t)]
    rule = bool(finite.size and (finite.min() > 1e11 or (finite.max() > 1e11 and np.median(finite) > 1e11)))
    assert om._milliseconds(t) is rule is ms


def test_a_label_set_met_in_another_metric_keeps_its_grid_key():
    grid = fr.make_grid(T0, T0 + 60, 15)
    a = fr.RawSeries({"gpu": "0", "Hostname": "n", "UUID": ""}, np.array([T0 + 1.0]), np.array([1.0]))
    b = fr.RawSeries({"Hostname": "n", "gpu": "0"}, np.array([T0 + 1.0]), np.array([2.0]))
    c = fr.RawSeries({"gpu": "1", "Hostname": "n"}, np.array([T0 + 1.0]), np.array([3.0]))
    cache: dict = {}
    for series in ([a, c], [b, c], [c, a, b]):
        keys, table = fr.grid_series(series, grid, 30.0, cache)
        alone, own = fr.grid_series(series, grid, 30.0)
        assert keys == alone and np.array_equal(table, own, equal_nan=True)
    assert fr.grid_series([a, b], grid, 30.0, cache)[0] == [(("Hostname", "n"), ("gpu", "0"))]  # one key


@pytest.mark.parametrize("converter", ["arrow", "pandas"])
@pytest.mark.parametrize("samples", [1, 5, 40])  # runs under SMALL_PAIRS lines, and over
def test_values_only_the_line_by_line_parser_reads_read_the_same_in_runs_of_any_length(
    tmp_path, monkeypatch, samples, converter
):
    """Up to SMALL_PAIRS lines are converted by numpy (as the line-by-line parser converts), more
    by Arrow's reader (pandas' where pyarrow is missing), which refuse some of what numpy reads
    (``nan``, ``1_0``): the file reads as through the line-by-line parser alone either way."""
    if converter == "pandas":
        monkeypatch.setattr(pairs, "_ARROW", None)
    values = ["1", "NaN", "nan", "+Inf", "-Inf", "1_0", "1e-300", "-0", "0.1", "2.5e+308"]
    out = ["# TYPE g gauge\n"]
    for k, v in enumerate(values):
        out += [f'g{{k="{k}"}} {v} {T0 + 15 * t}\n' for t in range(samples)]
    out.append("# EOF\n")
    path = tmp_path / "r.om"
    path.write_bytes("".join(out).encode())
    fast, ref = om.read_openmetrics(path), reference_read(path)
    assert [s.labels for s in fast[0]["g"]] == [s.labels for s in ref[0]["g"]]
    for x, y in zip(fast[0]["g"], ref[0]["g"], strict=True):
        assert np.array_equal(x.values.view(np.int64), y.values.view(np.int64))
        assert np.array_equal(x.times, y.times)
