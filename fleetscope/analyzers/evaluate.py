"""Score the detectors against simulated scenarios with known faults.

For every scenario spec in a folder the simulator writes the recording and its ground truth, the
analyzer reads the recording back from disk (the same path as ``fleetscope analyze --input``), and
the findings are matched to the expected ones:

* a finding matches an expectation of the same kind when it is on the same node (and GPU, where
  both name one) and starts between two minutes before the fault's onset and the fault's end;
  ``mfu_drop`` expectations match on time only;
* recall per kind = expectations matched / expectations; precision per kind = findings that match
  an expectation / findings (an expectation marked optional, a borderline effect, neither counts as
  missed nor makes its finding a false positive);
* detection delay = ``confirmed_at`` of the first matching finding - onset, per fault;
* a finding of severity ``info`` is never a false positive (an expected one counts for recall);
* an expectation marked ``single`` (one incident, one finding) is matched by its earliest finding
  only: further findings matching it alone are false positives; ``node_level`` expectations match
  only findings without a GPU; ``job_id`` expectations only findings of that job (or of none);
* everything is also reported per scenario ``family`` (the spec's, ``classic`` for old truths);
* the goodput account (realistic truths carry the simulated one): per job and category, the error
  of the account against the truth as a share of the job's window GPU-hours
  (:data:`GOODPUT_BOUND`: each badput category within 2%).
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleetscope.analyzers.findings import Finding
from fleetscope.errors import FleetscopeError
from fleetscope.times import parse_rfc3339

if TYPE_CHECKING:
    from fleetscope.analyzers.config import DetectorConfig

MATCH_BEFORE_S = 120.0
#: The goodput account's bound: every category within this share of the window's GPU-hours.
GOODPUT_BOUND = 0.02
KINDS = (
    "failing_node",
    "straggler",
    "mfu_drop",
    "job_hang",
    "monitoring_gap",
    "membership_change",
    "slow_replica",
    "failing_replica",
    "capacity",
)


@dataclass
class ScenarioResult:
    name: str
    nodes: int
    faults: list[dict[str, Any]]
    findings: list[Finding]
    matched: list[tuple[dict, Finding | None]] = field(default_factory=list)
    false_positives: list[Finding] = field(default_factory=list)
    delays: dict[str, float | None] = field(default_factory=dict)  # fault kind -> seconds
    seconds: float = 0.0
    family: str = "classic"
    #: Job id -> category -> (account - truth) / the truth's whole (empty without a true account).
    goodput: dict[str, dict[str, float]] = field(default_factory=dict)
    #: The largest |sum of the parts - the whole| / the whole over the scenario's accounts.
    goodput_residual: float = 0.0


def account_residual(accounts: dict[str, Any]) -> float:
    """How far the accounts' parts are from summing to their whole (share of the whole)."""
    worst = 0.0
    for a in accounts.values():
        whole = a.whole_gpu_seconds or 1.0
        worst = max(worst, abs(sum(a.gpu_seconds.values()) - a.whole_gpu_seconds) / whole)
        worst = max(worst, -min(a.gpu_seconds.values(), default=0.0) / whole)  # no part below zero
    return worst


def score_goodput(truth: dict, accounts: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per job and category, the account's error against the truth's ``goodput`` block, as a
    share of the true whole (a job the account misses counts its every category as missed)."""
    out: dict[str, dict[str, float]] = {}
    for job, t in (truth.get("goodput") or {}).items():
        whole = float(t["whole_gpu_seconds"]) or 1.0
        a = accounts.get(job)
        got = a.gpu_seconds if a is not None else {}
        cats = dict.fromkeys([*t["gpu_seconds"], "whole"])
        errs = {
            k: (float(got.get(k, 0.0)) - float(t["gpu_seconds"].get(k, 0.0))) / whole
            for k in cats
            if k != "whole"
        }
        errs["whole"] = ((a.whole_gpu_seconds if a is not None else 0.0) - whole) / whole
        out[job] = errs
    return out


def _matches(exp: dict, fault: dict, f: Finding, window_end: float) -> bool:
    if f.kind != exp["kind"]:
        return False
    if exp["kind"] != "mfu_drop":
        if f.node != exp.get("node"):
            return False
        if exp.get("gpu") is not None and f.gpu is not None and f.gpu != exp["gpu"]:
            return False
        if exp.get("node_level") and f.gpu is not None:
            return False
    if exp.get("job_id") is not None and f.job_id is not None and f.job_id != exp["job_id"]:
        return False
    onset = parse_rfc3339(fault["onset"]) or 0.0
    end = parse_rfc3339(fault.get("end")) or window_end
    return onset - MATCH_BEFORE_S <= f.start <= end


def score_scenario(truth: dict, findings: list[Finding]) -> ScenarioResult:
    window_end = parse_rfc3339(truth["window"]["end"]) or 0.0
    family = truth.get("family") or truth["spec"].get("family") or "classic"
    res = ScenarioResult(truth["scenario"], truth["spec"]["nodes"], truth["faults"], findings, family=family)
    used: set[int] = set()
    for fault in truth["faults"]:
        first: float | None = None
        for exp in fault["expected"]:
            hits = [f for f in findings if _matches(exp, fault, f, window_end)]
            best = min(hits, key=lambda f: f.start) if hits else None
            for f in [best] if exp.get("single") and best is not None else hits:
                used.add(id(f))
            if exp.get("optional"):
                continue
            res.matched.append((exp, best))
            if best is not None:
                conf = parse_rfc3339(best.evidence.get("confirmed_at")) or best.start
                d = conf - (parse_rfc3339(fault["onset"]) or 0.0)
                first = d if first is None else min(first, d)
        res.delays[fault["kind"]] = first
    res.false_positives = [f for f in findings if id(f) not in used and f.severity != "info"]
    return res


@dataclass
class SuiteReport:
    results: list[ScenarioResult]

    def per_kind(self) -> dict[str, dict[str, Any]]:
        return {kind: _score(self.results, kind) for kind in KINDS}

    def families(self) -> list[str]:
        return sorted({r.family for r in self.results}, key=lambda f: (f != "classic", f))

    def per_family(self) -> dict[str, dict[str, Any]]:
        """Every kind together, per scenario family (plus the number of scenarios)."""
        out = {}
        for fam in self.families():
            rs = [r for r in self.results if r.family == fam]
            out[fam] = {"scenarios": len(rs), **_score(rs, None)}
        return out

    def delays(self) -> dict[str, dict[str, Any]]:
        """Per injected fault kind: how many were injected (``faults``), how many of those the truth
        says a detector must report (``must_find``; look-alikes and faults that only warn expect
        nothing or only optional findings), how many of those were found (``detected``) and missed
        (``missed``), and the detection delays."""
        by: dict[str, list[tuple[float | None, bool]]] = {}
        for r in self.results:
            required = {f["kind"] for f in r.faults if any(not e.get("optional") for e in f["expected"])}
            for kind, d in r.delays.items():
                by.setdefault(kind, []).append((d, kind in required))
        out = {}
        for kind, ds in sorted(by.items()):
            got = [d for d, _ in ds if d is not None]
            must = sum(1 for _, req in ds if req)
            out[kind] = {
                "faults": len(ds),
                "must_find": must,
                "detected": len(got),
                "missed": must - len(got),
                "max_delay_s": max(got) if got else None,
                "mean_delay_s": sum(got) / len(got) if got else None,
            }
        return out

    def goodput(self) -> dict[str, dict[str, Any]]:
        """Per family: scenarios with a true account, the largest error per category, and whether
        every badput category stays within :data:`GOODPUT_BOUND`."""
        out: dict[str, dict[str, Any]] = {}
        for fam in self.families():
            errs = [e for r in self.results if r.family == fam for e in r.goodput.values()]
            if not errs:
                continue
            worst = {k: max(abs(e.get(k, 0.0)) for e in errs) for k in errs[0]}
            bad = {k: v for k, v in worst.items() if k not in ("productive", "whole")}
            out[fam] = {
                "jobs": len(errs),
                "max_error": {k: round(v, 5) for k, v in worst.items()},
                "within_bound": all(v <= GOODPUT_BOUND for v in bad.values()),
            }
        return out

    def goodput_sums_to_whole(self, tolerance: float = 1e-9) -> bool:
        """Whether every scenario's every account sums to its whole with no part below zero."""
        return all(r.goodput_residual <= tolerance for r in self.results)

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenarios": len(self.results),
            "per_kind": self.per_kind(),
            "per_family": self.per_family(),
            "delays": self.delays(),
            "goodput": self.goodput(),
            "goodput_sums_to_whole": self.goodput_sums_to_whole(),
            "details": [
                {
                    "scenario": r.name,
                    "family": r.family,
                    "nodes": r.nodes,
                    "seconds": round(r.seconds, 2),
                    "faults": [f["kind"] for f in r.faults],
                    "missed": [e for e, f in r.matched if f is None],
                    "false_positives": [f.to_dict() for f in r.false_positives],
                }
                for r in self.results
            ],
        }

    def render(self) -> str:
        kinds, fams, faults = self.per_kind(), self.per_family(), self.delays()
        kw = max(len("KIND"), *map(len, kinds)) + 2
        lines = [
            f"{len(self.results)} scenarios",
            "",
            f"{'KIND':<{kw}}{'EXPECTED':>9}{'FOUND':>7}{'FINDINGS':>9}{'FP':>5}{'PRECISION':>11}{'RECALL':>8}"
            f"{'CAUSE OK':>10}",
        ]
        for kind, k in kinds.items():
            lines.append(
                f"{kind:<{kw}}{k['expected']:>9}{k['found']:>7}{k['findings']:>9}{k['false_positives']:>5}"
                f"{k['precision']:>11.3f}{k['recall']:>8.3f}{k['cause_accuracy']:>10.3f}"
            )
        fw = max(len("FAMILY"), *map(len, fams)) + 2
        lines += [
            "",
            f"{'FAMILY':<{fw}}{'SCENARIOS':>10}{'EXPECTED':>9}{'FOUND':>7}{'FINDINGS':>9}{'FP':>5}"
            f"{'PRECISION':>11}{'RECALL':>8}",
        ]
        for fam, k in fams.items():
            lines.append(
                f"{fam:<{fw}}{k['scenarios']:>10}{k['expected']:>9}{k['found']:>7}{k['findings']:>9}"
                f"{k['false_positives']:>5}{k['precision']:>11.3f}{k['recall']:>8.3f}"
            )
        aw = max(len("FAULT INJECTED"), *map(len, faults), 0) + 2
        lines += [
            "",
            "MUST FIND: injected faults a detector has to report (look-alikes and faults that only",
            "warn expect nothing); MISSED: of those, the ones no finding matched.",
            f"{'FAULT INJECTED':<{aw}}{'INJECTED':>9}{'MUST FIND':>10}{'FOUND':>7}{'MISSED':>7}"
            f"{'MAX DELAY':>11}{'MEAN DELAY':>12}",
        ]
        for kind, d in faults.items():
            none = "-" if d["must_find"] else "n/a"
            mx = none if d["max_delay_s"] is None else f"{d['max_delay_s']:.0f} s"
            mean = none if d["mean_delay_s"] is None else f"{d['mean_delay_s']:.0f} s"
            lines.append(
                f"{kind:<{aw}}{d['faults']:>9}{d['must_find']:>10}{d['detected']:>7}{d['missed']:>7}"
                f"{mx:>11}{mean:>12}"
            )
        gp = self.goodput()
        if gp:
            lines += ["", f"{'GOODPUT':<16}{'JOBS':>6}{'WORST BADPUT ERROR':>20}{'WITHIN 2%':>11}"]
            for fam, g in gp.items():
                worst = max(
                    (v for k, v in g["max_error"].items() if k not in ("productive", "whole")), default=0.0
                )
                lines.append(
                    f"{fam:<16}{g['jobs']:>6}{worst:>19.2%} {'yes' if g['within_bound'] else 'NO':>10}"
                )
        problems: list[tuple[str, dict[str, Any] | None, Finding | None]] = [
            (r.name, e, None) for r in self.results for e, f in r.matched if f is None
        ]
        problems += [(r.name, None, f) for r in self.results for f in r.false_positives]
        if problems:
            lines += ["", "misses and false positives:"]
            for name, e, f in problems:
                if e is not None:
                    lines.append(f"  {name}: missed {e['kind']} ({e['cause']}) on {e.get('node') or 'job'}")
                elif f is not None:
                    lines.append(
                        f"  {name}: false {f.kind} {f.cause} on {f.node or 'job'} gpu {f.gpu} at "
                        f"{f.to_dict()['start']}"
                    )
        return "\n".join(lines) + "\n"


def _score(results: list[ScenarioResult], kind: str | None) -> dict[str, Any]:
    """Expected, found, findings, false positives, recall, precision and cause accuracy of one
    finding kind (``None``: all kinds) over ``results``; info findings count in neither."""

    def mine(k: str) -> bool:
        return kind is None or k == kind

    exps = [(e, f) for r in results for e, f in r.matched if mine(e["kind"])]
    found = [(e, f) for e, f in exps if f is not None]
    fps = [f for r in results for f in r.false_positives if mine(f.kind)]
    n_find = sum(
        1
        for r in results
        for f in r.findings
        if mine(f.kind) and (f.severity != "info" or any(f is g for _, g in r.matched))
    )
    cause_ok = sum(1 for e, f in found if f.cause == e["cause"])
    return {
        "expected": len(exps),
        "found": len(found),
        "findings": n_find,
        "false_positives": len(fps),
        "recall": len(found) / len(exps) if exps else 1.0,
        "precision": (n_find - len(fps)) / n_find if n_find else 1.0,
        "cause_accuracy": cause_ok / len(found) if found else 1.0,
    }


def evaluate(
    folder: str | Path,
    workdir: str | Path | None = None,
    config: DetectorConfig | None = None,
    progress: Callable[[str], None] | None = None,
    families: list[str] | None = None,
    jobs: int = 1,
) -> SuiteReport:
    """Generate, analyze and score every ``*.json``/``*.yaml`` scenario spec in ``folder``
    (only those of ``families`` when given), ``jobs`` scenarios at a time in worker processes.

    Each scenario is independent (its own recording, analysis and truth), so the results are the
    same whatever ``jobs`` is; they come back in the specs' order."""
    from fleetscope.simulate.spec import ScenarioSpec

    if jobs < 1:
        raise FleetscopeError("--jobs must be at least 1")
    folder = Path(folder)
    paths = (
        sorted(p for p in folder.iterdir() if p.suffix in (".json", ".yaml", ".yml"))
        if folder.is_dir()
        else []
    )
    if not paths:
        raise FleetscopeError(f"no scenario specs (*.json, *.yaml) in {folder}")
    specs = [(p, ScenarioSpec.load(p)) for p in paths]
    specs = [(p, spec) for p, spec in specs if not families or spec.family in families]
    if not specs:
        raise FleetscopeError(f"no scenario specs of family {', '.join(families or [])} in {folder}")
    results: list[ScenarioResult | None] = [None] * len(specs)
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        work = [(i, p, spec, Path(tmp), config) for i, (p, spec) in enumerate(specs)]
        if progress:
            progress(f"evaluating {len(work)} scenarios, {min(jobs, len(work))} at a time")
        if jobs == 1 or len(work) == 1:
            for done, (i, res) in enumerate(map(_evaluate_one, work), 1):
                results[i] = res
                _report_progress(progress, specs[i][0], res, done, len(work))
        else:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor, as_completed

            # forkserver: workers start from a clean process, not a fork of a caller that may hold
            # threads (the service, a test runner) mid-lock.
            ctx = multiprocessing.get_context("forkserver")
            with ProcessPoolExecutor(max_workers=min(jobs, len(work)), mp_context=ctx) as pool:
                futures = [pool.submit(_evaluate_one, w) for w in work]
                for done, fut in enumerate(as_completed(futures), 1):
                    i, res = fut.result()
                    results[i] = res
                    _report_progress(progress, specs[i][0], res, done, len(work))
    return SuiteReport([r for r in results if r is not None])


def _evaluate_one(work: tuple[int, Path, Any, Path, DetectorConfig | None]) -> tuple[int, ScenarioResult]:
    """One scenario: simulate it into ``tmp``, analyze the recording from disk, score it."""
    from fleetscope.analyzers.analyze_source import analyze_source
    from fleetscope.analyzers.core import LOADED
    from fleetscope.simulate.record import write_scenario
    from fleetscope.window.sources import open_source

    i, path, spec, tmp, config = work
    t0 = time.monotonic()
    out, truth_path = write_scenario(spec, tmp / f"{path.stem}.om")
    try:
        analysis = analyze_source(open_source(out, None, LOADED), config)
    finally:
        out.unlink(missing_ok=True)
    truth = json.loads(truth_path.read_text())
    res = score_scenario(truth, analysis.findings)
    res.goodput = score_goodput(truth, analysis.goodput)
    res.goodput_residual = account_residual(analysis.goodput)
    res.seconds = time.monotonic() - t0
    return i, res


def _report_progress(
    progress: Callable[[str], None] | None, path: Path, res: ScenarioResult, done: int, total: int
) -> None:
    if progress:
        progress(f"[{done}/{total}] {path.stem}: {len(res.findings)} findings, {res.seconds:.1f} s")
