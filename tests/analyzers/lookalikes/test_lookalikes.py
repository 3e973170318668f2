"""Real-cluster look-alikes: recordings the project's simulator does not make, analyzed end to end.

Each case (``generator.CASES``) is written to a file, analyzed with ``analyze_file`` like
``fleetscope analyze --input``, and judged: the findings it must produce appear, and no other
warning or critical finding does. A case the detectors get wrong fails here on purpose.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.analyzers.lookalikes.generator import CASES, Case
from tests.support.analysis import analyze_file

pytestmark = [pytest.mark.slow]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_lookalike(case: Case, tmp_path: Path) -> None:
    path = case.build().write(tmp_path / f"{case.name}.om")
    report = analyze_file(path)
    problems = case.judge(report.findings)
    assert not problems, f"{case.name}: " + "; ".join(problems)


def test_generator_is_deterministic(tmp_path: Path) -> None:
    case = CASES[0]
    a = case.build().write(tmp_path / "a.om").read_bytes()
    b = case.build().write(tmp_path / "b.om").read_bytes()
    assert a == b


def test_judge_catches_a_missing_and_an_extra_finding() -> None:
    from fleetscope.analyzers.findings import Finding
    from tests.analyzers.lookalikes.generator import Want

    case = Case("x", lambda: None, (Want("straggler", "node-1", "3"),))  # type: ignore[arg-type,return-value]
    extra = Finding(
        kind="failing_node", severity="critical", node="node-2", start=0.0, cause="xid_79", action=""
    )
    problems = case.judge([extra])
    assert len(problems) == 2 and problems[0].startswith("missing") and "failing_node" in problems[1]


def test_judge_one_of_and_may() -> None:
    from fleetscope.analyzers.findings import Finding
    from tests.analyzers.lookalikes.generator import Want

    hang = Finding(kind="job_hang", severity="critical", node=None, start=0.0, cause="hang", action="")
    slow = Finding(kind="straggler", severity="warning", node="node-2", start=0.0, cause="unknown", action="")
    either = Case("x", lambda: None, one_of=(Want("job_hang"), Want("failing_node")))  # type: ignore[arg-type,return-value]
    assert either.judge([hang]) == []
    assert either.judge([])[0].startswith("missing one of")
    maybe = Case("y", lambda: None, may=(Want("straggler", "node-2"),))  # type: ignore[arg-type,return-value]
    assert maybe.judge([]) == [] and maybe.judge([slow]) == []
    assert maybe.judge([hang])[0].startswith("unexpected critical job_hang")
