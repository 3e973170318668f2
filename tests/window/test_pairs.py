"""The ``value timestamp`` converters (fleetscope.window.pairs) against ``float()``, the
line-by-line parser's reading, and the recording reader taking their answers in later, on the
worker's thread: the same series and the same first error as the line-by-line parser."""

from __future__ import annotations

import gzip
import os
import threading
import time

import numpy as np
import pytest

from fleetscope.errors import FleetscopeError
from fleetscope.window import openmetrics as om
from fleetscope.window import pairs
from tests.support.reads import assert_same_reads, reference_read

T0 = 1796032800

CONVERTERS = {"arrow": pairs._ARROW, "pandas": pairs._by_pandas, "numpy": pairs._small}


def _bits(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, dtype=np.float64).view(np.int64)


def _decimals(rng: np.random.Generator, n: int) -> list[str]:
    """Decimals of every kind a recorder writes: shortest reprs over the whole range (subnormals
    too), long mantissas, integers, exponents, halfway-looking digit strings."""
    mags = 10.0 ** rng.integers(-320, 308, n)
    out = [repr(float(v)) for v in rng.standard_normal(n) * mags]
    out += [f"{v:.25g}" for v in rng.standard_normal(n) * 10.0 ** rng.integers(-30, 30, n)]
    out += [str(int(v)) for v in rng.integers(-(2**62), 2**62, n)]
    out += [
        "9007199254740993",
        "0.1",
        "1e23",
        "2.2250738585072011e-308",
        "4.9e-324",
        "1.7976931348623157e308",
    ]
    return out


@pytest.mark.parametrize("name", CONVERTERS)
def test_every_converter_gives_the_bits_float_gives(name):
    rng = np.random.default_rng(7)
    values = _decimals(rng, 300)
    if name == "numpy":  # the few-lines converter: in slices of its size
        values = values[: pairs.SMALL_PAIRS]
    times = [str(T0 * 1000 + 15_000 * k) for k in range(len(values))]
    text = "".join(f"{v} {t}\n" for v, t in zip(values, times, strict=True)).encode()
    got = CONVERTERS[name](text, len(values))
    assert got is not None
    assert np.array_equal(_bits(got[0]), _bits([float(v) for v in values]))
    assert np.array_equal(_bits(got[1]), _bits([float(t) for t in times]))


@pytest.mark.parametrize(
    "times",
    [
        ["1796032800.5", "1796032815"],  # a fraction: read as floats
        ["-0", "1796032815"],  # -0.0 as float() reads it, not the integer's +0.0
        ["1.796032800e9", "1796032815"],
        ["99999999999999999999999", "1796032815"],  # beyond an integer of 64 bits
        ["9007199254740993", "1796032815"],  # over 2**53: rounded as float() rounds
    ],
)
def test_arrow_reads_timestamps_that_are_not_plain_integers_as_float_reads_them(times):
    rows = [(f"{k}.5", times[k % 2]) for k in range(2 * pairs.SMALL_PAIRS)]
    text = "".join(f"{v} {t}\n" for v, t in rows).encode()
    got = pairs._ARROW(text, len(rows))
    assert got is not None
    assert np.array_equal(_bits(got[1]), _bits([float(t) for _, t in rows]))


@pytest.mark.parametrize(
    "line",
    ["5", "5 6 7", "", "1_0 5", '"5" 6', "0x10 6", "five 6", "5 ", " 5 6", "5  6", "5 6\r7 8"],
)
@pytest.mark.parametrize("name", ["arrow", "pandas"])
def test_a_text_that_is_not_two_numbers_a_line_reads_as_none(name, line):
    rows = [f"{k} {T0 + k}" for k in range(2 * pairs.SMALL_PAIRS)]
    rows[7] = line
    assert CONVERTERS[name](("\n".join(rows) + "\n").encode(), len(rows)) is None


def test_special_values_read_as_float_reads_them_or_not_at_all():
    """What Arrow reads of the values float() reads, it reads to the same bits (what it refuses
    goes line by line: the reader's tests above)."""
    for v in [
        "NaN",
        "nan",
        "+Inf",
        "-Inf",
        "inf",
        "Infinity",
        "-0",
        "+1",
        "1.",
        ".5",
        "1E+05",
        "1e-400",
        "1e400",
    ]:
        text = "".join(f"{v} {T0 + k}\n" for k in range(2 * pairs.SMALL_PAIRS)).encode()
        got = pairs._ARROW(text, 2 * pairs.SMALL_PAIRS)
        if got is not None:
            assert np.array_equal(_bits(got[0]), _bits([float(v)] * 2 * pairs.SMALL_PAIRS)), v
    assert pairs._ARROW(b"NaN 1\n" * 40, 40) is not None  # the spelling the exporters write


def test_the_worker_answers_each_call_and_a_failure_reads_as_none(monkeypatch):
    rng = np.random.default_rng(3)
    texts = []
    for k in range(40):
        n = int(rng.integers(pairs.SMALL_PAIRS + 1, 500))
        rows = [f"{rng.standard_normal()!r} {T0 + j}" for j in range(n)]
        if k % 7 == 3:
            rows[n // 2] = "x y"
        texts.append((("\n".join(rows) + "\n").encode(), n))
    answers = [pairs.parse_soon(text, n) for text, n in texts]
    for (text, n), parsed in zip(texts, answers, strict=True):
        want, got = pairs.parse_pairs(text, n), parsed.result()
        assert (want is None) == (got is None)
        if want is not None and got is not None:
            assert np.array_equal(_bits(want[0]), _bits(got[0])) and np.array_equal(want[1], got[1])

    def broken(text: bytes, n: int) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(pairs, "parse_pairs", broken)
    assert pairs.parse_soon(*texts[0]).result() is None  # the worker lives on
    monkeypatch.undo()
    assert pairs.parse_soon(*texts[1]).result() is not None


def test_a_forked_child_parses_on_a_worker_of_its_own():
    text = b"".join(b"%d %d\n" % (k, T0 + k) for k in range(100))
    assert pairs.parse_soon(text, 100).result() is not None  # the parent's worker is made
    pid = os.fork()
    if pid == 0:  # the child: its parse must not wait on the parent's thread
        ok = False
        try:
            done = threading.Event()
            parsed = pairs.parse_soon(text, 100)
            threading.Thread(target=lambda: (parsed.result(), done.set()), daemon=True).start()
            ok = done.wait(30) and parsed.result() is not None
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


# --------------------------------------------------------------- the reader, parses taken in later
@pytest.fixture
def slow_worker(monkeypatch):
    """The worker's parses take 50 ms, so the reader meets what follows a run before that run's
    parse is in (on a quick machine they are often in by the next flush); and the grid's size is
    judged by the first run alone, so judging it takes no later parse in."""
    real = pairs.parse_pairs
    monkeypatch.setattr(om, "SHAPES", 1)

    def slow(text: bytes, n: int):
        if threading.current_thread().name.startswith("fleetscope-pairs"):
            time.sleep(0.05)
        return real(text, n)

    monkeypatch.setattr(pairs, "parse_pairs", slow)


def _write(tmp_path, lines: list[str]):
    path = tmp_path / "r.om"
    path.write_text("\n".join([*lines, "# EOF", ""]))
    return path


def _series(name: str, k: int, n: int, value=lambda j: str(j)) -> list[str]:
    return [f'{name}{{gpu="{k}",Hostname="n 1"}} {value(j)} {T0 + 15 * j}' for j in range(n)]


@pytest.mark.parametrize("chunk", [700, 4096, 1 << 20])
def test_a_run_that_does_not_parse_reads_in_the_family_it_was_met_in(
    tmp_path, monkeypatch, slow_worker, chunk
):
    """A run refused by the bulk parse is read line by line when its parse is taken in, which may
    be after the comment lines that follow it: a skipped family whose name begins its lines, and
    '# EOF'. It reads as it was met (every sample kept, no "data after '# EOF'")."""
    monkeypatch.setattr(om, "CHUNK_BYTES", chunk)
    lines = ["# TYPE gpu_util gauge"]
    lines += _series("gpu_util", 0, 60, value=lambda j: "1_0" if j == 30 else str(j))
    lines += _series("gpu_util", 1, 60)
    lines += ["# TYPE gpu gauge"] + _series("gpu", 0, 60)
    path = _write(tmp_path, lines)
    for metrics in (["gpu_util"], None):
        fast = om.read_openmetrics(path, metrics)
        assert_same_reads(fast, reference_read(path, metrics))
        assert [s.values.size for s in fast[0]["gpu_util"]] == [60, 60]


@pytest.mark.parametrize("chunk", [700, 1 << 20])
def test_the_first_error_in_the_file_is_the_one_raised(tmp_path, monkeypatch, slow_worker, chunk):
    """A run with a sample without its timestamp (its error met when its parse is taken in, line
    by line) before a label set that does not parse (met at once by the fast path): the first is
    raised, with its line number."""
    monkeypatch.setattr(om, "CHUNK_BYTES", chunk)
    lines = ["# TYPE gpu_util gauge"]
    lines += _series("gpu_util", 0, 60)
    lines[50] = lines[50].rsplit(" ", 1)[0]
    lines += _series("gpu_util", 1, 60)
    lines += [f'gpu_util{{gpu="2",Hostname=n}} 1 {T0}'] + _series("gpu_util", 3, 60)
    path = _write(tmp_path, lines)
    with pytest.raises(FleetscopeError) as ref:
        reference_read(path)
    with pytest.raises(FleetscopeError) as fast:
        om.read_openmetrics(path)
    assert str(fast.value) == str(ref.value) and ": line 51 " in str(fast.value)


@pytest.mark.parametrize("damage", ["long line", "corrupt stream"])
def test_a_line_that_does_not_parse_is_met_before_a_damage_after_it(
    tmp_path, monkeypatch, slow_worker, damage
):
    monkeypatch.setattr(om, "CHUNK_BYTES", 2048)
    monkeypatch.setattr(om, "MAX_LINE_BYTES", 4096)
    lines = ["# TYPE gpu_util gauge"] + _series("gpu_util", 0, 60)
    lines[50] = lines[50].rsplit(" ", 1)[0]
    lines += _series("gpu_util", 1, 60)
    if damage == "long line":
        path = _write(tmp_path, [*lines, "x" * 10_000])
    else:
        body = gzip.compress(("\n".join([*lines, *_series("gpu_util", 2, 2000), "# EOF", ""])).encode())
        path = tmp_path / "r.om.gz"
        path.write_bytes(body[: len(body) // 2] + bytes(64) + body[len(body) // 2 :])
    with pytest.raises(FleetscopeError, match=": line 51 is not an OpenMetrics sample"):
        om.read_openmetrics(path)


def test_a_stream_hands_out_the_runs_parsed_later_with_their_family(tmp_path, monkeypatch, slow_worker):
    """iter_openmetrics hands a family out at the next ``# TYPE`` line: the family's parses are
    taken in first, so each batch holds all of its samples."""
    monkeypatch.setattr(om, "CHUNK_BYTES", 900)
    lines = []
    for f in ("a", "b", "c"):
        lines += [f"# TYPE {f} gauge"]
        for k in range(3):
            lines += _series(f, k, 50, value=lambda j, k=k: "1_0" if (j == 7 and k == 1) else str(j))
    path = _write(tmp_path, lines)
    batches = list(om.iter_openmetrics(path))
    assert [name for name, _ in batches] == ["a", "b", "c"]
    whole = om.read_openmetrics(path)[0]
    for name, series in batches:
        assert [s.values.size for s in series] == [50, 50, 50]
        for x, y in zip(series, whole[name], strict=True):
            assert np.array_equal(x.values, y.values) and np.array_equal(x.times, y.times)


@pytest.mark.parametrize("chunk", [1500, 1 << 20])
def test_a_line_read_line_by_line_comes_after_the_runs_before_it(tmp_path, monkeypatch, slow_worker, chunk):
    """A series' line that the fast path sends line by line (a tab before its value) after a run
    of it whose parse is not in yet: the run's samples first, as in the file."""
    monkeypatch.setattr(om, "CHUNK_BYTES", chunk)
    lines = ["# TYPE gpu_util gauge"] + _series("gpu_util", 0, 60)
    lines += [f'gpu_util{{gpu="0",Hostname="n 1"}}\t99 {T0 + 15 * 60}']
    lines += _series("gpu_util", 1, 60)
    path = _write(tmp_path, lines)
    fast = om.read_openmetrics(path)
    assert_same_reads(fast, reference_read(path))
    assert fast[0]["gpu_util"][0].values[-1] == 99


def test_the_grid_size_is_judged_by_the_first_runs_once_read(tmp_path, monkeypatch, slow_worker):
    """check_size judges a grid by the first runs' spans and spacings: their parses are taken in
    for it, so a read refused early is refused after as many chunks as without the worker."""
    monkeypatch.setattr(om, "CHUNK_BYTES", 4096)
    monkeypatch.setattr(om, "SHAPES", 200)
    lines = ["# TYPE gpu_util gauge"]
    for k in range(8):
        lines += _series("gpu_util", k, 40)
    read = om.RecordingRead(_write(tmp_path, lines))
    read._read_on(lambda: read.reader.lineno > 100)
    assert len(read.reader.shapes) >= 2 and not read.reader.jobs
    read.close()


def test_every_run_is_in_at_the_end(tmp_path, monkeypatch, slow_worker):
    monkeypatch.setattr(om, "CHUNK_BYTES", 2048)
    lines = ["# TYPE gpu_util gauge"]
    for k in range(12):
        lines += _series("gpu_util", k, 40)
    path = _write(tmp_path, lines)
    fast = om.read_openmetrics(path)
    assert_same_reads(fast, reference_read(path))
    assert [s.values.size for s in fast[0]["gpu_util"]] == [40] * 12


def _family_file(tmp_path):
    lines = []
    for f in ("a", "b"):
        lines += [f"# TYPE {f} gauge"]
        for k in range(6):
            lines += _series(f, k, 240)  # an hour at 15 s
    return _write(tmp_path, lines)


def _without_worker(monkeypatch):
    """pandas' reader on the reader's own thread: every parse taken in at once."""
    monkeypatch.setattr(pairs, "_ARROW", None)


def test_the_head_span_counts_every_run_of_the_first_family(tmp_path, monkeypatch, slow_worker):
    """The family's last series (its samples the latest) still being parsed when the next
    family's ``# TYPE`` line is met: it counts."""
    monkeypatch.setattr(om, "CHUNK_BYTES", 4096)
    lines = ["# TYPE a gauge"]
    for k in range(6):  # one series after another in time too: the last one ends the span
        lines += [f'a{{gpu="{k}"}} 1 {T0 + 15 * (40 * k + j)}' for j in range(40)]
    lines += ["# TYPE b gauge", *_series("b", 0, 40)]
    read = om.RecordingRead(_write(tmp_path, lines))
    assert read.first_family_seconds() == 15 * (40 * 6 - 1)
    read.close()


def test_a_stream_hands_out_the_same_batches_with_the_worker_or_without(tmp_path, monkeypatch, slow_worker):
    monkeypatch.setattr(om, "CHUNK_BYTES", 4096)
    monkeypatch.setattr(om, "BATCH_SAMPLES", 500)  # a family handed out in batches
    monkeypatch.setattr(om, "BATCH_CHECK_CHUNKS", 1)
    path = _family_file(tmp_path)

    def batches() -> list[tuple[str, list[int]]]:
        return [(name, [s.values.size for s in series]) for name, series in om.iter_openmetrics(path)]

    beside = batches()
    _without_worker(monkeypatch)
    alone = batches()
    assert beside == alone and len(alone) > 4
