"""The recording reader's fast path (issue 32): ISA-L and zlib inflate a recording to the same series
and fail the same clear way on a damaged stream; a label set parsed once stays each series' own; the
gather index of the bulk parse is the pieces' bytes in order."""

from __future__ import annotations

import gzip
import zlib

import numpy as np
import pytest
from isal import igzip, isal_zlib

from fleetscope.errors import FleetscopeError
from fleetscope.window import openmetrics as om
from tests.support.reads import assert_same_reads

T0 = 1796032800

#: The gzip module and its error, as :func:`fleetscope.window.openmetrics._inflater` picks them.
INFLATERS = {"isal": (igzip, isal_zlib.error), "zlib": (gzip, zlib.error)}


def _recording(gpus: int = 24, samples: int = 80) -> bytes:
    """Two families over the same label sets (the second family's are parsed from the cache)."""
    out = []
    for family in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_TEMP"):
        out.append(f"# TYPE {family} gauge\n")
        for g in range(gpus):
            head = f'{family}{{gpu="{g % 8}",Hostname="node-{g // 8}",modelName="NVIDIA H100 80GB HBM3"}}'
            out += [f"{head} {(g * 7 + t) % 101}.25 {T0 + 15 * t}\n" for t in range(samples)]
    out.append("# EOF\n")
    return "".join(out).encode()


@pytest.fixture(params=sorted(INFLATERS))
def inflater(request, monkeypatch):
    module, error = INFLATERS[request.param]
    monkeypatch.setattr(om, "_gzip", module)
    monkeypatch.setattr(om, "_InflateError", error)
    monkeypatch.setattr(om, "CHUNK_BYTES", 4096)  # many chunks: lines cut at every chunk border
    return request.param


def test_isal_is_the_inflater_where_it_is_installed():
    assert om._gzip is igzip and om._InflateError is isal_zlib.error


def test_either_inflater_reads_what_the_plain_file_holds(tmp_path, inflater):
    body = _recording()
    (tmp_path / "r.om").write_bytes(body)
    (tmp_path / "r.om.gz").write_bytes(gzip.compress(body))
    plain = om.read_openmetrics(tmp_path / "r.om")
    assert_same_reads(om.read_openmetrics(tmp_path / "r.om.gz"), plain)
    assert sum(len(s.times) for s in plain[0]["DCGM_FI_DEV_GPU_UTIL"]) == 24 * 80


@pytest.mark.parametrize("damage", ["truncated", "bad block", "bad checksum"])
def test_a_damaged_stream_is_one_clear_error_with_either_inflater(tmp_path, inflater, damage):
    data = bytearray(gzip.compress(_recording(), mtime=0))
    if damage == "truncated":
        data = data[: len(data) // 2]
    elif damage == "bad block":
        data[10] = 0b111  # the first deflate block: final, of the reserved type 3
    else:
        data[-8] ^= 0xFF  # the CRC-32 of the trailer: every byte inflates, the check fails
    path = tmp_path / "r.om.gz"
    path.write_bytes(bytes(data))
    with pytest.raises(FleetscopeError) as err:
        om.read_openmetrics(path)
    message = str(err.value)
    assert message.startswith(f"{path} is truncated or corrupt") and "\n" not in message, message


def test_a_label_set_parsed_once_is_each_series_own_and_a_bad_one_still_fails(tmp_path):
    raw = om.read_openmetrics(_write(tmp_path / "r.om", _recording(gpus=2, samples=3)))[0]
    util, temp = raw["DCGM_FI_DEV_GPU_UTIL"][0].labels, raw["DCGM_FI_DEV_GPU_TEMP"][0].labels
    assert util == temp and util is not temp
    util["gpu"] = "changed"
    assert raw["DCGM_FI_DEV_GPU_TEMP"][0].labels["gpu"] == "0"
    # The same label text again, now malformed after a good one: the error of a first meeting.
    good = f'a_gauge{{gpu="0",Hostname="n"}} 1 {T0}\n'
    for bad, why in (
        (f'b_gauge{{gpu="0",Hostname="n"}} 1 {T0}\nc_gauge{{gpu="0",Hostname="n}} 1 {T0}\n', "labels"),
        (f'b_gauge{{gpu="0",Hostname="n"}} 1 {T0}\n0_gauge{{gpu="0",Hostname="n"}} 1 {T0}\n', "sample"),
    ):
        path = _write(tmp_path / "bad.om", f"# TYPE a_gauge gauge\n{good}{bad}# EOF\n".encode())
        with pytest.raises(FleetscopeError, match=f"line 4: .*{why}"):
            om.read_openmetrics(path)


def test_a_label_set_too_long_to_remember_still_parses(tmp_path):
    value = "x" * (om.LABEL_CACHE_BYTES + 10)
    body = f'# TYPE a_gauge gauge\na_gauge{{long="{value}"}} 1 {T0}\n# TYPE b_gauge gauge\n'
    body += f'b_gauge{{long="{value}"}} 2 {T0}\n# EOF\n'
    raw = om.read_openmetrics(_write(tmp_path / "r.om", body.encode()))[0]
    assert raw["a_gauge"][0].labels == raw["b_gauge"][0].labels == {"long": value}


def test_the_gather_index_is_the_pieces_bytes_in_order():
    rng = np.random.default_rng(3)
    lens = rng.integers(1, 40, 500)
    starts = np.cumsum(lens + rng.integers(0, 300, 500))  # pieces in order, apart or adjacent
    starts[7] = starts[6] + lens[6]  # two adjacent pieces
    ends = np.cumsum(lens)
    index = om._gather_index(starts, lens, ends, np.empty(int(ends[-1]), dtype=np.intp))
    want = np.concatenate([np.arange(s, s + n) for s, n in zip(starts, lens, strict=True)])
    assert index.dtype == np.intp and np.array_equal(index, want)
    # Into the reader's kept scratch, left dirty by a larger flush before.
    scratch = np.full(int(ends[-1]) + 100, 12345, dtype=np.intp)
    index = om._gather_index(starts, lens, ends, scratch[: int(ends[-1])])
    assert np.shares_memory(index, scratch) and np.array_equal(index, want)


def _write(path, body: bytes):
    path.write_bytes(body)
    return path


def test_the_inflate_thread_hands_over_newlines_of_real_lines_only(tmp_path, inflater):
    """A recording's chunks come with their newlines; a chunk of empty lines without (the parsing
    thread finds them: the thread ahead would otherwise queue 8 bytes per byte), and a gzipped file
    of them is still the one quick error."""
    (tmp_path / "r.om.gz").write_bytes(gzip.compress(_recording()))
    # A chunk is the thread's buffer, filled again once the next one is asked for: checked as it comes.
    chunks = [
        (nl is not None and len(nl), np.array_equal(nl, np.flatnonzero(np.frombuffer(d, np.uint8) == 10)))
        for d, _, nl in om._chunks(tmp_path / "r.om.gz")
    ]
    assert len(chunks) > 3 and all(has and same for has, same in chunks)
    (tmp_path / "n.om.gz").write_bytes(gzip.compress(b"\n" * 40_000))
    assert [nl for _, _, nl in om._chunks(tmp_path / "n.om.gz")] == [None] * 10
    with pytest.raises(FleetscopeError, match="no '# EOF'"):
        om.read_openmetrics(tmp_path / "n.om.gz")
