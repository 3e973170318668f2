"""``analyze --chunk``: a streamed analysis gives the one-shot report, field by field (issue 32).

The whole JSON document (``Report.document()``: findings, each job's goodput account per
category, its restarts, badput lines and their causes, the checkpoint advice) of ``--chunk off``
is compared with that of a chunk length that cuts the window (a round one and an odd one, so
the boundaries fall at different places), generically: every key of either document, every list
item, so a field added later is compared too. Tolerances (:func:`differences`):

* numbers: within 0.1 % of the larger, or one unit of the last decimal the JSON keeps
  (:data:`ABS_TOL`); numbers inside a text (``cost 2.62 GPU-hours``) to the last decimal
  printed;
* times (RFC 3339 strings): within :data:`TIME_TOL_S`.

Cases: one scenario of each simulator family (fleetscope/simulate/families.py), and histories
written by the training library (tests/analyzers/goodput_histories.py) with a failure, a save
and an unreported stall placed just before a chunk boundary, so that the failure's restart, its
rework and the save's end fall in the next chunk. Small ones run in the fast tier; the long ones
(hours, ``--chunk 1h``) are marked slow.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from fleetscope.cli import main
from fleetscope.simulate.families import FAMILIES, family_of_scenario
from fleetscope.simulate.record import write_scenario
from fleetscope.simulate.spec import ScenarioSpec
from tests.analyzers.goodput_histories import History

SCENARIOS = Path(__file__).resolve().parents[1] / "fixtures" / "scenarios"
#: Numbers: relative tolerance (0.1 % of the larger), and an absolute floor of one unit of the
#: fourth decimal (the JSON's GPU-hours and ratios are rounded to 4 places).
REL_TOL = 1e-3
ABS_TOL = 1e-4
#: Times: a finding's start or end is read on the grid; the chunks share the one-shot grid.
TIME_TOL_S = 0.0

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _time(s: str) -> float | None:
    if not (len(s) >= 20 and s[4] == "-" and s[10] == "T" and s.endswith("Z")):
        return None
    try:
        return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _close(a: float, b: float, abs_tol: float = ABS_TOL) -> bool:
    return abs(a - b) <= max(REL_TOL * max(abs(a), abs(b)), abs_tol) + 1e-12


def _same_text(a: str, b: str) -> bool:
    """Equal words, and numbers equal to the last decimal printed (a rounding may flip it)."""
    if _NUMBER.sub("#", a) != _NUMBER.sub("#", b):
        return False
    for x, y in zip(_NUMBER.findall(a), _NUMBER.findall(b), strict=True):
        places = max(len(x.partition(".")[2]), len(y.partition(".")[2]))
        if not _close(float(x), float(y), 10.0**-places):
            return False
    return True


def _same_scalar(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return _close(float(a), float(b))
    if isinstance(a, str) and isinstance(b, str):
        ta, tb = _time(a), _time(b)
        return abs(ta - tb) <= TIME_TOL_S if ta is not None and tb is not None else _same_text(a, b)
    return a == b


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Every place where two JSON documents differ beyond the tolerances (module docstring)."""
    out: list[str] = []
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted({*a, *b}, key=str):
            if k not in a or k not in b:
                out.append(f"{path}/{k}: only in {'one-shot' if k in a else 'streamed'}")
            else:
                out += differences(a[k], b[k], f"{path}/{k}")
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out.append(f"{path}: {len(a)} items one-shot, {len(b)} streamed")
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            out += differences(x, y, f"{path}[{i}]")
    elif not _same_scalar(a, b):
        out.append(f"{path}: {a!r} one-shot, {b!r} streamed")
    return out


def _document(capsys, path: Path, chunk: str) -> dict:
    assert main(["analyze", "--input", str(path), "--chunk", chunk, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def assert_streamed_equal(capsys, path: Path, chunks: tuple[str, ...]) -> dict:
    """The report of each ``--chunk`` in ``chunks`` is that of ``--chunk off``; the one-shot
    document is returned."""
    one = _document(capsys, path, "off")
    for chunk in chunks:
        diff = differences(one, _document(capsys, path, chunk))
        assert not diff, f"--chunk {chunk} differs from --chunk off:\n" + "\n".join(diff[:40])
    return one


def test_the_comparison_sees_any_field() -> None:
    """The comparison can fail: a number, a text's number, a time, a field only one side has."""
    doc = {"goodput": {"j": {"gpu_hours": {"rework": 1.0}, "badput": [{"text": "x cost 2.62 GPU-hours"}]}}}
    assert not differences(doc, json.loads(json.dumps(doc)))
    other = json.loads(json.dumps(doc))
    other["goodput"]["j"]["gpu_hours"]["rework"] = 1.01
    other["goodput"]["j"]["badput"][0]["text"] = "x cost 2.64 GPU-hours"
    other["goodput"]["j"]["new_field"] = 1
    found = differences(doc, other)
    assert len(found) == 3, found
    assert differences({"t": "2026-11-30T10:00:00Z"}, {"t": "2026-11-30T10:00:15Z"})
    assert not differences({"t": "x cost 2.62"}, {"t": "x cost 2.63"})  # one unit: within
    assert differences({"n": [1, 2]}, {"n": [1]})


# --- one scenario of each simulator family -------------------------------------------------------

#: family -> a small scenario of it with something to find or account for.
FAMILY_CASES = {
    "classic": "gpu_lost_4n_s31",
    "training": "goodput_4n_s181_rework",
    "inference": "inference_gpu_lost_4n_s203",
    "neuron": "neuron_device_lost_4n_s303",
}
#: family -> a longer scenario (slow tier).
FAMILY_SLOW_CASES = {
    "classic": "gpu_lost_8n_s32",
    "training": "goodput_8n_s183_hang",
    "inference": "inference_kv_pressure_4n_s204",
    "neuron": "neuron_ecc_4n_s302",
}


def test_every_family_has_a_case() -> None:
    assert set(FAMILY_CASES) == set(FAMILY_SLOW_CASES) == {f.name for f in FAMILIES}
    for fam, name in {**FAMILY_CASES, **FAMILY_SLOW_CASES}.items():
        spec = ScenarioSpec.load(SCENARIOS / f"{name}.json")
        assert spec.family is not None and family_of_scenario(spec.family).name == fam


def _scenario(name: str, tmp_path: Path) -> Path:
    out, _ = write_scenario(ScenarioSpec.load(SCENARIOS / f"{name}.json"), tmp_path / f"{name}.om")
    return out


@pytest.mark.parametrize("family", sorted(FAMILY_CASES))
def test_each_family_streamed_equals_one_shot(family: str, tmp_path: Path, capsys) -> None:
    doc = assert_streamed_equal(capsys, _scenario(FAMILY_CASES[family], tmp_path), ("10m", "17m"))
    assert doc["findings"], "each case has something to find"


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(FAMILY_SLOW_CASES))
def test_each_family_streamed_equals_one_shot_longer(family: str, tmp_path: Path, capsys) -> None:
    assert_streamed_equal(capsys, _scenario(FAMILY_SLOW_CASES[family], tmp_path), ("7m", "13m", "17m"))


@pytest.mark.slow
def test_a_score_read_over_the_whole_span_still_differs(tmp_path: Path, capsys) -> None:
    """The one difference left on the family scenarios (docs/analyzers.md#streaming): a merged
    finding keeps the largest of the chunks' scores, so a throttled inference replica's score reads
    1.315 one-shot and 1.405 in 7-minute chunks. Everything else of the report is equal; when the
    score is read over the whole span too, this test says so and becomes the plain equality."""
    path = _scenario("inference_throttle_6n_s202", tmp_path)
    diff = differences(_document(capsys, path, "off"), _document(capsys, path, "7m"))
    assert diff, "the score is now equal: make this case a plain assert_streamed_equal"
    assert all(d.split(":")[0].endswith("/score") for d in diff), diff


# --- library-written histories, failures near a chunk boundary ------------------------------------


def _before(h: History, boundary: float, lead: float) -> History:
    """Run ``h`` until ``lead`` seconds before ``boundary`` (seconds from its start)."""
    return h.run_for(max(boundary - lead - h.t, h.step_s))


def _fail_at_17m(h: History) -> History:
    """A node crash 40 s before the 17-minute boundary: its abort, requeue, load and the rework
    back to the save fall in the next chunk; a save straddles the 34-minute one."""
    h.run_for(300).save(30)
    _before(h, 1020, 40).fail(60, node=1)
    h.run_for(600)
    _before(h, 2040, 20).save(60)
    return h.run_for(500)


def _fresh_restart_at_10m(h: History) -> History:
    """A failure before any save, 30 s before the 10-minute boundary (the new run starts from
    step 0: all the steps before are rework), then an unreported evaluation across 20 minutes."""
    _before(h, 600, 30).fail(0)
    _before(h, 1200, 60).evaluate(180, reported=False)
    return h.run_for(600)


HISTORIES: dict[str, tuple[dict, Callable[[History], History]]] = {
    "fail_at_17m": (dict(nodes=4, gpn=4, seed=31, exporter=True), _fail_at_17m),
    "fresh_restart_at_10m": (dict(nodes=4, gpn=4, seed=32), _fresh_restart_at_10m),
}


@pytest.mark.parametrize("name", sorted(HISTORIES))
def test_library_histories_streamed_equal_one_shot(name: str, tmp_path: Path, capsys) -> None:
    kwargs, script = HISTORIES[name]
    path = tmp_path / f"{name}.om"
    script(History(**kwargs)).write(path)
    doc = assert_streamed_equal(capsys, path, ("10m", "17m"))
    assert doc["goodput"]["4711"]["restarts"] >= 1


def _two_failures_over_hours(h: History) -> History:
    """Two failures over four hours, each a minute before an hour's boundary (one a node crash,
    one a hang), saves every 20 minutes, one straddling the third hour's boundary."""
    for k in range(1, 5):
        while h.t < k * 3600 - 900:
            h.run_for(1200 - 60).save(45)
        if k == 1:
            _before(h, 3600, 60).fail(90, node=3)
        elif k == 2:
            _before(h, 7200, 60).fail(240)
        elif k == 3:
            _before(h, 10800, 30).save(90)
        h.run_for(300)
    return h


@pytest.mark.slow
def test_a_four_hour_history_streamed_by_the_hour_equals_one_shot(tmp_path: Path, capsys) -> None:
    path = tmp_path / "four_hours.om"
    _two_failures_over_hours(History(nodes=8, gpn=8, seed=33, exporter=True)).write(path)
    doc = assert_streamed_equal(capsys, path, ("1h", "17m"))
    acct = doc["goodput"]["4711"]
    assert acct["restarts"] == 2
    assert acct["checkpoint_advice"]["saves"] >= 10
    assert acct["checkpoint_advice"]["node_hours"] > 3 * 8
