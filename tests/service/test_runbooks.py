"""The runbooks work offline (issue 33, part 2): the live service serves docs/runbooks.md itself at
``/runbooks``; every alert's ``runbook_url`` and every finding link on the page resolves against the
running service to an anchor of that page; the base is set at generate time
(``fleetscope generate --runbook-base-url``) and defaults to the service's default address."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest
import yaml

from fleetscope import generate, runbooks
from fleetscope.alerts.config import THRESHOLDS
from fleetscope.contract import FINDING_KINDS
from fleetscope.defaults import SERVICE_PORT
from fleetscope.service.app import ServiceSettings, create_app
from tests.service.support import ScriptedAnalyze, make_analysis
from tests.service.test_page import serving
from tests.support.prom import http_get

ROOT = Path(__file__).resolve().parents[2]


def _runbook_urls(rule_texts: list[str]) -> list[str]:
    urls = []
    for text in rule_texts:
        for group in yaml.safe_load(text)["groups"]:
            urls += [r["annotations"]["runbook_url"] for r in group["rules"] if "alert" in r]
    return urls


def test_every_runbook_link_resolves_against_the_running_service():
    app = create_app(ServiceSettings(run_analysis=False), ScriptedAnalyze(make_analysis()))
    assert app.state.runner.run_once()
    with serving(app) as hostport:
        base = f"http://{hostport}/"
        code, body = http_get(base + "runbooks")
        assert code == 200, code
        page = body.decode()
        ids = runbooks.anchors(page)
        # the page's finding links: status says where, relative to the page
        code, status = http_get(base + "api/v1/status")
        where = json.loads(status)["runbooks"]
        link = urllib.parse.urljoin(base, where)
        assert link == base + "runbooks", link
        assert set(FINDING_KINDS) <= ids, set(FINDING_KINDS) - ids
        # every committed rule's runbook_url: the service's default address, an anchor of the page
        urls = _runbook_urls([p.read_text() for p in sorted((ROOT / "alerts").glob("*.rules.yml"))])
        assert len(urls) > 50
        for url in urls:
            address, _, anchor = url.partition("#")
            assert address == f"http://127.0.0.1:{SERVICE_PORT}/runbooks" == THRESHOLDS.runbook_url_base, url
            assert anchor in ids, f"{url}: no such anchor on the served /runbooks"
        # Served on the same path by this running service (the port differs from the default's).
        code, _ = http_get(f"http://{hostport}{urllib.parse.urlsplit(urls[0]).path}")
        assert code == 200
    assert "<script" not in page and "src=" not in page  # nothing loaded from anywhere else


def test_generate_sets_the_runbook_base_and_refuses_a_bad_one():
    base = "https://ops.example.internal/fleetscope/runbooks"
    files = generate.outputs(base)
    rules = [t for p, t in files.items() if p.parent == generate.RULES_DIR and p.suffix == ".yml"]
    urls = _runbook_urls(rules)
    assert urls and all(u.startswith(base + "#") for u in urls), urls[:3]
    ids = runbooks.anchors(files[generate.RUNBOOKS_PAGE])
    assert all(u.rsplit("#", 1)[1] in ids for u in urls)
    for bad in ("ftp://x/runbooks", "runbooks", "http://x/runbooks#top"):
        res = subprocess.run(
            [sys.executable, "-m", "fleetscope", "generate", "--check", "--runbook-base-url", bad],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert res.returncode == 2, res
        assert "Traceback" not in res.stderr and "--runbook-base-url" in res.stderr, res.stderr


@pytest.mark.parametrize(
    ("markdown", "html"),
    [
        ("### FleetscopeGpuLost", '<h3 id="fleetscopegpulost">FleetscopeGpuLost</h3>'),
        (
            "## A job hangs: find the rank",
            '<h2 id="a-job-hangs-find-the-rank">A job hangs: find the rank</h2>',
        ),
        (
            "see [drain](#take-a-node-out-of-service)",
            '<p>see <a href="#take-a-node-out-of-service">drain</a></p>',
        ),
        ("see [hang](hang.md#x)", "<p>see hang (docs/hang.md)</p>"),
        (
            "`<gpu>` and **bold** *em*",
            "<p><code>&lt;gpu&gt;</code> and <strong>bold</strong> <em>em</em></p>",
        ),
        ("<script>x</script>", "<p>&lt;script&gt;x&lt;/script&gt;</p>"),
        (
            "| a | b |\n| --- | --- |\n| `1` | 2 |",
            "<table><thead><tr><th>a</th><th>b</th></tr></thead>"
            "<tbody><tr><td><code>1</code></td><td>2</td></tr></tbody></table>",
        ),
        ("1. one\n   more\n2. two", "<ol><li>one more</li><li>two</li></ol>"),
        ("```sh\na < b\n```", "<pre><code>a &lt; b</code></pre>"),
    ],
)
def test_the_renderer(markdown: str, html: str):
    assert runbooks.render_body(markdown) == html
