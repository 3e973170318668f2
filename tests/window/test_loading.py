"""Loading: resets, gaps, duplicates, out-of-order samples, gzip; the grid rule."""

from __future__ import annotations

import gzip

import numpy as np

from fleetscope.window.frames import increase_steps, rate
from tests.support.analysis import load_file

T0 = 1796032800


def _write(path, lines):
    body = "# TYPE training_steps counter\n" + "".join(lines) + "# EOF\n"
    path.write_text(body)
    return path


def test_messy_samples(tmp_path):
    s = 'training_steps_total{job_id="1",rank="0",Hostname="n",gpu="0"}'
    lines = [
        f"{s} {v} {T0 + t}\n"
        for t, v in [
            (0, 10),
            (30, 30),
            (15, 20),  # out of order
            (45, 40),
            (45, 41),  # duplicate timestamp: the last one wins
            (60, 5),  # counter reset
            (75, 20),
            (150, 95),  # a gap of 75 s (4 steps)
        ]
    ]
    fr = load_file(_write(tmp_path / "m.om", lines), step=15)
    v = fr.get("training_steps_total").values[:, 0]
    assert list(fr.times - T0) == [0, 15, 30, 45, 60, 75, 90, 105, 120, 135, 150]
    assert list(v[:7]) == [10, 20, 30, 41, 5, 20, 20]  # 90 still sees the sample at 75 (lookback < 2 steps)
    assert np.isnan(v[7:10]).all() and v[10] == 95
    inc = increase_steps(v[:, None])[:, 0]
    assert list(inc[1:7]) == [10, 10, 11, 5, 15, 0]  # the reset counts from zero
    assert inc[10] == 75  # the gap is bridged from the last value seen
    r = rate(v[:, None], 15, 4)[:, 0]
    assert r[4] == (10 + 11 + 5 + 10) / 60


def test_gzip_and_milliseconds(tmp_path):
    s = 'fleetscope_gpu_up{gpu="0",Hostname="n"}'
    body = "# TYPE fleetscope_gpu_up gauge\n" + "".join(
        f"{s} 1 {(T0 + t) * 1000}\n" for t in range(0, 60, 15)
    )
    (tmp_path / "g.om.gz").write_bytes(gzip.compress((body + "# EOF\n").encode()))
    fr = load_file(tmp_path / "g.om.gz")
    assert fr.step == 15 and fr.start == T0 and len(fr.times) == 4
    assert fr.get("fleetscope_gpu_up").values[:, 0].tolist() == [1, 1, 1, 1]


def test_escaped_labels_and_unwanted_families(tmp_path):
    body = (
        "# TYPE DCGM_FI_DEV_XID_ERRORS gauge\n"
        'DCGM_FI_DEV_XID_ERRORS{gpu="1",Hostname="n",err_code="79",err_msg="GPU has \\"fallen\\" off, bus"} '
        "79 "
        f"{T0}\n# TYPE something_else gauge\n"
        f'something_else{{a="b"}} 1 {T0}\n'
        "# EOF\n"
    )
    (tmp_path / "e.om").write_text(body)
    fr = load_file(tmp_path / "e.om", metrics=["DCGM_FI_DEV_XID_ERRORS"])
    assert list(fr.metrics) == ["DCGM_FI_DEV_XID_ERRORS"]
    assert fr.get("DCGM_FI_DEV_XID_ERRORS").labels.iloc[0]["err_msg"] == 'GPU has "fallen" off, bus'


def test_an_escaped_backslash_before_n_is_not_a_newline(tmp_path):
    body = (
        "# TYPE DCGM_FI_DEV_XID_ERRORS gauge\n"
        'DCGM_FI_DEV_XID_ERRORS{gpu="1",Hostname="n",err_code="79",err_msg="C:\\\\new\\nline"} '
        f"79 {T0}\n# EOF\n"
    )
    (tmp_path / "e.om").write_text(body)
    fr = load_file(tmp_path / "e.om", metrics=["DCGM_FI_DEV_XID_ERRORS"])
    assert fr.get("DCGM_FI_DEV_XID_ERRORS").labels.iloc[0]["err_msg"] == "C:\\new\nline"
