// fleetscope live page: polls the JSON API and redraws. No framework, no build step, no CDN.
// Data is only ever written with textContent / attributes, never parsed as HTML.
"use strict";

(function () {
  const SVG = "http://www.w3.org/2000/svg";
  const STATES = ["healthy", "degraded", "failing"];
  let refreshMs = 10000;
  let chosenJob = new URLSearchParams(window.location.search).get("job");

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }

  function stateClass(s) {
    return "state-" + (STATES.includes(s) ? s : "unknown");
  }

  async function getJSON(path) {
    // Relative to the page (works behind a path prefix), without user:password@ even if the page's
    // URL had them: fetch() refuses such URLs; the browser resends its HTTP auth on its own.
    const url = new URL(path, document.baseURI);
    url.username = "";
    url.password = "";
    const resp = await fetch(url.href, { headers: { Accept: "application/json" }, cache: "no-store" });
    const body = await resp.json().catch(() => ({}));
    return { ok: resp.ok, status: resp.status, body: body };
  }

  function ago(seconds) {
    if (seconds === null || seconds === undefined) return "never";
    if (seconds < 90) return Math.round(seconds) + " s ago";
    if (seconds < 5400) return Math.round(seconds / 60) + " min ago";
    return Math.round(seconds / 3600) + " h ago";
  }

  function renderBanner(status, counts) {
    const banner = document.getElementById("banner");
    let worst = "unknown";
    if (counts) {
      worst = counts.failing ? "failing" : counts.degraded ? "degraded" : "healthy";
    }
    banner.className = "banner " + stateClass(worst) + (status && status.stale ? " stale" : "");
    banner.dataset.state = worst;
    const summary = document.getElementById("summary");
    if (counts) {
      summary.textContent = STATES.map((s) => (counts[s] || 0) + " " + s).join(" · ");
    }
    const fresh = document.getElementById("freshness");
    if (!status) {
      fresh.textContent = "";
    } else if (status.stale) {
      fresh.textContent = "STALE: verdicts from " + ago(status.age_seconds) +
        (status.last_error ? " (" + status.last_error + ")" : "");
    } else {
      fresh.textContent = "updated " + ago(status.age_seconds);
    }
  }

  function renderGrid(nodes, stale) {
    const grid = document.getElementById("grid");
    grid.classList.toggle("stale", !!stale);
    grid.replaceChildren();
    for (const n of nodes) {
      const cell = el("div", "node " + stateClass(n.state));
      cell.id = "node-" + n.node;
      cell.dataset.node = n.node;
      cell.dataset.state = n.state;
      cell.title = n.node + ": " + n.state + (n.reasons.length ? " (" + n.reasons.join("; ") + ")" : "");
      cell.appendChild(el("span", "name", n.node));
      const gpus = el("span", "gpus");
      for (const g of n.gpus) {
        const box = el("span", "gpu " + stateClass(g.state));
        box.dataset.gpu = g.gpu;
        box.dataset.state = g.state;
        box.title = "GPU " + g.gpu + ": " + g.state;
        gpus.appendChild(box);
      }
      cell.appendChild(gpus);
      grid.appendChild(cell);
    }
    // Positions for the end-to-end test (a screenshot's pixel is sampled at a node's cell).
    for (const cell of grid.children) {
      const r = cell.getBoundingClientRect();
      cell.dataset.rect = [r.left + window.scrollX, r.top + window.scrollY, r.width, r.height]
        .map(Math.round).join(",");
    }
  }

  function renderFindings(findings) {
    const body = document.getElementById("findings-body");
    body.replaceChildren();
    const open = findings.filter((f) => f.end === null);
    document.getElementById("no-findings").hidden = open.length > 0;
    for (const f of open) {
      const tr = el("tr", "sev-" + f.severity);
      tr.dataset.kind = f.kind;
      tr.dataset.node = f.node || "";
      for (const v of [f.start, f.kind, f.severity, f.node, f.gpu, f.rank, f.job_id, f.cause, f.action]) {
        tr.appendChild(el("td", "", v === null ? "" : v));
      }
      tr.title = Object.entries(f.evidence).map(([k, v]) => k + ": " + v).join("\n");
      body.appendChild(tr);
    }
  }

  function renderJobs(jobs) {
    const select = document.getElementById("job");
    const ids = jobs.map((j) => j.job_id);
    if (!chosenJob || !ids.includes(chosenJob)) chosenJob = ids.length ? ids[0] : null;
    select.replaceChildren();
    for (const id of ids) {
      const o = el("option", "", id);
      o.value = id;
      o.selected = id === chosenJob;
      select.appendChild(o);
    }
  }

  function fmt(x, digits, unit) {
    return x === null || x === undefined ? "n/a" : Number(x).toFixed(digits) + (unit || "");
  }

  function renderChart(data) {
    const svg = document.getElementById("chart");
    svg.replaceChildren();
    const summary = document.getElementById("job-summary");
    if (!data) {
      summary.textContent = "No job in the window.";
      return;
    }
    const j = data.job;
    summary.textContent = "job " + j.job_id + ": " + j.ranks + " ranks on " + j.nodes.length + " nodes · MFU " +
      fmt(j.mfu === null ? null : j.mfu * 100, 1, "%") + " · " + fmt(j.tokens_per_second, 0, " tokens/s") +
      " · step " + fmt(j.step_seconds, 2, " s") + " · stragglers: " + (j.stragglers.length ? j.stragglers.join(", ") : "none");
    const scores = data.scores;
    if (!scores.length) return;
    const W = 900, H = 220, pad = 28;
    const top = Math.max(1.5, ...scores.map((s) => s.score)) * 1.05;
    const bw = (W - 2 * pad) / scores.length;
    const y = (v) => H - pad - (v / top) * (H - 2 * pad);
    const strag = new Set(j.stragglers);
    scores.forEach((s, i) => {
      const r = document.createElementNS(SVG, "rect");
      r.setAttribute("class", "bar" + (strag.has(s.rank) ? " straggler" : ""));
      r.setAttribute("x", String(pad + i * bw + bw * 0.1));
      r.setAttribute("width", String(Math.max(1, bw * 0.8)));
      r.setAttribute("y", String(y(s.score)));
      r.setAttribute("height", String(Math.max(0, H - pad - y(s.score))));
      const t = document.createElementNS(SVG, "title");
      t.textContent = "rank " + s.rank + " (" + s.node + " GPU " + s.gpu + "): " + s.score.toFixed(3);
      r.appendChild(t);
      svg.appendChild(r);
    });
    const ref = document.createElementNS(SVG, "line");
    ref.setAttribute("class", "ref");
    ref.setAttribute("x1", String(pad));
    ref.setAttribute("x2", String(W - pad));
    ref.setAttribute("y1", String(y(1)));
    ref.setAttribute("y2", String(y(1)));
    svg.appendChild(ref);
    const label = (x, yy, text) => {
      const t = document.createElementNS(SVG, "text");
      t.setAttribute("class", "axis");
      t.setAttribute("x", String(x));
      t.setAttribute("y", String(yy));
      t.textContent = text;
      svg.appendChild(t);
    };
    label(2, y(1) + 3, "1.0");
    label(pad, H - 8, "rank " + scores[0].rank);
    label(W - pad - 50, H - 8, "rank " + scores[scores.length - 1].rank);
  }

  // The account's categories in report order (fleetscope.analyzers.report.GOODPUT_CATEGORIES).
  const GOODPUT = ["productive", "checkpoint", "recovery", "rework", "stall", "eval", "slowdown", "idle"];
  const TOP_BADPUT = 5;

  function pct(x) {
    return fmt(x === null || x === undefined ? null : x * 100, 1, "%");
  }

  function clock(iso) {
    // "2026-11-29T08:40:00Z" -> "08:40"; the table shows when a line happened, the title the date.
    return typeof iso === "string" && iso.length >= 16 ? iso.slice(11, 16) : "";
  }

  function adviceText(a) {
    const min = (s) => fmt(s / 60, s < 600 ? 1 : 0, " min");
    const rate = a.prior ? "prior: 1 failure per 1,000 node-days" :
      a.failures + " failure(s) in " + fmt(a.node_hours, 1, " node-hours");
    let text = "Checkpoint advice: save every " + min(a.recommended_s) +
      " (now " + (a.current_s === null ? "unknown" : min(a.current_s)) + "; a save takes " +
      fmt(a.save_s, 0, " s") + ", MTBF " + fmt(a.mtbf_s / 3600, 1, " h") + " from " + rate +
      "; Young " + fmt(a.young_s, 0, " s") + ", Daly " + fmt(a.daly_s, 0, " s") + ")";
    if (a.waste_current !== null) {
      text += " · expected waste " + pct(a.waste_current) + " → " + pct(a.waste_recommended);
    }
    if (a.gain_gpu_hours_per_day !== null) {
      text += " · saves " + fmt(a.gain_gpu_hours_per_day, 1, " GPU-hours/day");
    }
    return text;
  }

  function renderGoodput(jobId, resp) {
    const bar = document.getElementById("goodput-bar");
    const legend = document.getElementById("goodput-legend");
    const body = document.getElementById("badput-body");
    const advice = document.getElementById("checkpoint-advice");
    const summary = document.getElementById("goodput-summary");
    for (const e of [bar, legend, body]) e.replaceChildren();
    advice.textContent = "";
    document.getElementById("goodput-job").textContent = jobId ? "job " + jobId : "";
    const g = resp && resp.ok ? resp.body.goodput : null;
    document.getElementById("badput").hidden = !g || !g.badput.length;
    const section = document.getElementById("goodput");
    section.dataset.job = g ? g.job_id : "";
    if (!g) {
      summary.textContent = jobId ? "No goodput account for job " + jobId + " in the window." : "No job in the window.";
      return;
    }
    const whole = g.whole_gpu_hours;
    summary.textContent = fmt(whole, 2, " GPU-hours") + " on " + fmt(g.gpus, 0, " GPUs") +
      " · effective training time " + pct(g.effective_training_ratio) + " · goodput " + pct(g.goodput_ratio) +
      " · " + g.restarts + " restart(s)";
    section.dataset.effective = String(g.effective_training_ratio);
    for (const cat of GOODPUT) {
      const h = g.gpu_hours[cat] || 0;
      const share = whole > 0 ? h / whole : 0;
      const label = cat + ": " + fmt(h, 2, " GPU-hours") + " (" + pct(share) + ")";
      if (share > 0) {
        const seg = el("div", "gp gp-" + cat);
        seg.dataset.category = cat;
        seg.dataset.gpuHours = String(h);
        seg.style.width = (share * 100).toFixed(3) + "%";
        seg.title = label;
        bar.appendChild(seg);
      }
      const li = el("li", "");
      li.dataset.category = cat;
      li.appendChild(el("span", "swatch gp-" + cat));
      li.appendChild(el("span", "", label));
      legend.appendChild(li);
    }
    // The bar's content box in page pixels, for the screenshot test (as the grid's cells).
    const r = bar.getBoundingClientRect();
    bar.dataset.rect = [r.left + bar.clientLeft + window.scrollX, r.top + bar.clientTop + window.scrollY,
      bar.clientWidth].map(Math.round).join(",");
    for (const b of g.badput.slice(0, TOP_BADPUT)) {
      const tr = el("tr", "");
      tr.dataset.category = b.category;
      const when = b.start ? clock(b.start) + "–" + clock(b.end) : "";
      for (const v of [b.category, fmt(b.gpu_hours, 2), pct(whole > 0 ? b.gpu_hours / whole : 0), when,
                       b.finding || "no finding", b.text]) {
        tr.appendChild(el("td", "", v));
      }
      if (b.start) tr.title = b.start + " – " + b.end;
      body.appendChild(tr);
    }
    if (g.checkpoint_advice) advice.textContent = adviceText(g.checkpoint_advice);
  }

  async function refresh() {
    try {
      const nodes = await getJSON("api/v1/nodes");
      if (!nodes.ok) {
        renderBanner(nodes.body.status || null, null);
        document.getElementById("summary").textContent =
          nodes.status === 401 ? "unauthorized" : nodes.status === 503 ? "waiting for the first analysis" : "error " + nodes.status;
        return;
      }
      renderBanner(nodes.body.status, nodes.body.counts);
      renderGrid(nodes.body.nodes, nodes.body.status.stale);
      const [findings, jobs] = await Promise.all([getJSON("api/v1/findings"), getJSON("api/v1/jobs")]);
      if (findings.ok) renderFindings(findings.body.findings);
      if (jobs.ok) {
        renderJobs(jobs.body.jobs);
        const path = chosenJob ? "api/v1/jobs/" + encodeURIComponent(chosenJob) : null;
        const [job, goodput] = path ? await Promise.all([getJSON(path), getJSON(path + "/goodput")]) : [null, null];
        renderChart(job && job.ok ? job.body : null);
        renderGoodput(chosenJob, goodput);
      }
      document.body.dataset.rendered = String(Date.now());
    } catch (e) {
      document.getElementById("freshness").textContent = "service unreachable";
    }
  }

  async function start() {
    const status = await getJSON("api/v1/status").catch(() => null);
    if (status && status.ok) {
      refreshMs = Math.min(30000, Math.max(2000, status.body.interval_seconds * 1000));
    }
    document.getElementById("job").addEventListener("change", (ev) => {
      chosenJob = ev.target.value;
      refresh();
    });
    await refresh();
    window.setInterval(refresh, refreshMs);
  }

  start();
})();
