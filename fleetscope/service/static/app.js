// fleetscope live page: polls the JSON API and redraws. No framework, no build step, no CDN.
// Data is only ever written with textContent / attributes, never parsed as HTML.
"use strict";

(function () {
  const SVG = "http://www.w3.org/2000/svg";
  const STATES = ["healthy", "degraded", "failing"];
  let refreshMs = 10000;
  let chosenJob = new URLSearchParams(window.location.search).get("job");
  // docs/runbooks.md as this service serves it (/runbooks, relative to the page), from /api/v1/status;
  // a finding's section is #<kind>.
  let runbooks = null;
  let jobStates = {};

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

  // "12 min ago" for an RFC 3339 time, relative to the analysis' end (the page's "now"); the
  // absolute time goes into the element's title (hover).
  let nowMs = Date.now();

  function rel(iso) {
    const t = Date.parse(iso);
    if (!iso || Number.isNaN(t)) return "";
    const s = Math.max(0, (nowMs - t) / 1000);
    if (s < 90) return Math.round(s) + " s ago";
    if (s < 5400) return Math.round(s / 60) + " min ago";
    if (s < 172800) return (s / 3600).toFixed(1) + " h ago";
    return Math.round(s / 86400) + " days ago";
  }

  function timeEl(tag, iso, prefix) {
    const e = el(tag, "time", (prefix || "") + rel(iso));
    if (iso) {
      e.title = iso.replace("T", " ").replace("Z", " UTC");
      e.dataset.time = iso;
    }
    return e;
  }

  // Text with its RFC 3339 times as relative times (the absolute one on hover).
  const RFC3339 = /\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z/g;

  function appendWithTimes(parent, text) {
    let last = 0;
    for (const m of text.matchAll(RFC3339)) {
      if (m.index > last) parent.appendChild(document.createTextNode(text.slice(last, m.index)));
      parent.appendChild(timeEl("span", m[0]));
      last = m.index + m[0].length;
    }
    if (last < text.length) parent.appendChild(document.createTextNode(text.slice(last)));
  }

  function duration(seconds) {
    if (seconds === null || seconds === undefined) return "n/a";
    if (seconds < 1) return Math.round(seconds * 1000) + " ms";
    if (seconds < 120) return Number(seconds).toFixed(seconds < 10 ? 2 : 1) + " s";
    if (seconds < 7200) return (seconds / 60).toFixed(1) + " min";
    return (seconds / 3600).toFixed(1) + " h";
  }

  function count(x) {
    return x === null || x === undefined ? "n/a" : Math.round(x).toLocaleString("en-US");
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
      const stuck = Object.entries(jobStates).filter(([, st]) => st === "stalled" || st === "down")
        .map(([id, st]) => "job " + id + " " + st);
      summary.textContent = STATES.map((s) => (counts[s] || 0) + " " + s).concat(stuck).join(" · ");
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

  function where(f) {
    const ev = f.evidence || {};
    const parts = [];
    if (ev.replica) parts.push("replica " + ev.replica + (ev.model ? " (" + ev.model + ")" : ""));
    else if (ev.model) parts.push("model " + ev.model);
    if (f.node) parts.push(f.node + (f.gpu !== null ? " GPU " + f.gpu : ""));
    if (f.rank !== null) parts.push("rank " + f.rank);
    if (f.job_id) parts.push("job " + f.job_id);
    return parts.join(" · ");
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
      const since = el("td", "");
      since.appendChild(timeEl("span", f.start));
      tr.appendChild(since);
      const kind = el("td", "");
      const link = el(runbooks ? "a" : "span", "runbook", f.kind);
      if (runbooks) {
        link.href = runbooks + "#" + f.kind;
        link.target = "_blank";
        link.rel = "noopener";
        link.title = "runbook: what " + f.kind + " means and what to do";
      }
      kind.appendChild(link);
      tr.appendChild(kind);
      tr.appendChild(el("td", "", f.severity));
      tr.appendChild(el("td", "where", where(f)));
      tr.appendChild(el("td", "", f.cause));
      const ev = el("td", "");
      const list = el("ul", "evidence");
      for (const [k, v] of Object.entries(f.evidence || {})) {
        if (k === "model" || k === "replica") continue;
        const li = el("li", "");
        li.appendChild(el("span", "ev-key", k + ": "));
        appendWithTimes(li, String(v));
        list.appendChild(li);
      }
      ev.appendChild(list);
      tr.appendChild(ev);
      tr.appendChild(el("td", "", f.action));
      body.appendChild(tr);
    }
  }

  function stateText(j) {
    if (j.state === "stalled") return "stalled since ";
    if (j.state === "down") return "down since ";
    return j.state;
  }

  function mfuCell(j) {
    const td = el("td", "mfu");
    if (j.mfu_now !== null) {
      td.textContent = fmt(j.mfu_now * 100, 1, " %");
      return td;
    }
    td.appendChild(el("span", "na", "n/a"));
    if (j.mfu_reason) td.appendChild(el("span", "reason", " (" + j.mfu_reason + ")"));
    if (j.mfu !== null && j.state !== "running") {
      td.appendChild(el("span", "muted", " · last " + fmt(j.mfu * 100, 1, " %") + " "));
      if (j.last_mfu_at) td.appendChild(timeEl("span", j.last_mfu_at));
    }
    return td;
  }

  function renderJobTable(jobs) {
    const body = document.getElementById("jobs-body");
    body.replaceChildren();
    jobStates = {};
    for (const j of jobs) {
      jobStates[j.job_id] = j.state;
      const tr = el("tr", "job job-" + j.state);
      tr.dataset.job = j.job_id;
      tr.dataset.state = j.state;
      tr.appendChild(el("td", "", j.job_id));
      const st = el("td", "");
      const badge = el("span", "badge badge-" + j.state, stateText(j));
      if ((j.state === "stalled" || j.state === "down") && j.since) badge.appendChild(timeEl("span", j.since));
      st.appendChild(badge);
      if (j.hang) {
        const who = j.hang.waiting_for || (j.hang.node ? "node " + j.hang.node : "no rank named");
        st.appendChild(el("div", "hang", "hang (" + j.hang.reason.replace(/_/g, " ") + "): waits for " + who));
      }
      tr.appendChild(st);
      tr.appendChild(el("td", "", j.ranks + " on " + j.nodes.length + " nodes"));
      tr.appendChild(el("td", "num", j.state === "running" ? duration(j.step_seconds) : "n/a (no steps)"));
      tr.appendChild(mfuCell(j));
      tr.appendChild(el("td", "num", j.state === "running" ? count(j.tokens_per_second) : "n/a"));
      tr.appendChild(el("td", "num", j.goodput_ratio === null ? "n/a" : pct(j.goodput_ratio)));
      tr.appendChild(el("td", "", j.stragglers.length ? "rank " + j.stragglers.join(", ") : "none"));
      body.appendChild(tr);
    }
  }

  function sloCell(slo) {
    const td = el("td", "slo slo-" + slo.state.replace(" ", "-"));
    td.dataset.state = slo.state;
    td.textContent = slo.state + (slo.burn_short !== null ? " · burn " + fmt(slo.burn_short, 1, "x") + " (5 min)" : "");
    td.title = (slo.objective * 100).toFixed(1) + "% " + (slo.threshold_s === null ? "not failing" : "under " + duration(slo.threshold_s)) +
      "; burn " + fmt(slo.burn_short, 2, "x") + " over 5 min, " + fmt(slo.burn_window, 2, "x") + " over the window";
    return td;
  }

  // A replica alive but not serving: what its failing_replica finding says (wedged or failing at
  // the front door), else whether its engine reports.
  function replicaState(r, f) {
    if (f && f.cause === "engine_wedged") return "wedged (" + ((f.evidence || {}).diagnosis || "no progress").split(":")[0] + ")";
    if (f && f.cause === "http_errors") return "failing requests (HTTP 5xx)";
    if (r.stalled_s) return "no progress for " + duration(r.stalled_s);
    return r.serving ? "serving" : "not serving";
  }

  // The evidence of a wedged replica, under its row: what is in flight, what stands still, its GPUs.
  function wedgeRow(f) {
    const ev = f.evidence || {};
    const tr = el("tr", "replica-evidence");
    tr.dataset.replica = ev.replica || "";
    const parts = [];
    for (const k of ["diagnosis", "requests_in_flight", "frozen", "stalled_for", "gpu_utilisation", "tensor_active",
                     "http_5xx_share", "http_5xx_rate", "engine_finished"]) {
      if (ev[k]) parts.push(k.replace(/_/g, " ") + ": " + ev[k]);
    }
    const td = el("td", "", parts.join(" · "));
    td.colSpan = 9;
    tr.appendChild(td);
    return tr;
  }

  function renderModels(models) {
    const box = document.getElementById("models");
    box.replaceChildren();
    for (const m of models) {
      const card = el("div", "model");
      card.dataset.model = m.model;
      card.appendChild(el("h3", "", m.model + " · " + m.serving + " of " + m.replicas.length + " replicas serving"));
      const head = el("table", "model-slo");
      const hr = el("tr", "");
      for (const h of ["TTFT SLO", "ITL SLO", "Errors SLO", "TTFT p95 (slowest)", "ITL mean"]) hr.appendChild(el("th", "", h));
      head.appendChild(hr);
      const row = el("tr", "");
      row.appendChild(sloCell(m.slo.ttft));
      row.appendChild(sloCell(m.slo.itl));
      if (m.slo.errors) row.appendChild(sloCell(m.slo.errors));
      row.appendChild(el("td", "num", duration(m.ttft_p95_s)));
      row.appendChild(el("td", "num", duration(m.itl_mean_s)));
      head.appendChild(row);
      card.appendChild(head);
      const named = {};
      const failing = {};
      for (const f of m.findings) {
        const r = (f.evidence || {}).replica;
        if (r) named[r] = (named[r] ? named[r] + ", " : "") + f.kind;
        if (r && f.kind === "failing_replica") failing[r] = f;
      }
      const t = el("table", "replicas");
      const th = el("tr", "");
      for (const h of ["replica", "node", "state", "TTFT p95", "ITL mean", "ITL p95", "requests/s", "KV cache", "finding"]) {
        th.appendChild(el("th", "", h));
      }
      t.appendChild(th);
      for (const r of m.replicas) {
        const f = failing[r.replica];
        const wedged = f && (f.cause === "engine_wedged" || f.cause === "http_errors");
        const tr = el("tr", "replica" + (named[r.replica] ? " named" : "") + (r.serving && !wedged ? "" : " down"));
        tr.dataset.replica = r.replica;
        for (const v of [r.replica, r.node, replicaState(r, f), duration(r.ttft_p95_s),
                         duration(r.itl_mean_s), duration(r.itl_p95_s), fmt(r.requests_per_s, 2),
                         r.kv_cache === null ? "n/a" : pct(r.kv_cache), named[r.replica] || ""]) {
          tr.appendChild(el("td", "", v));
        }
        t.appendChild(tr);
        if (wedged) t.appendChild(wedgeRow(f));
      }
      card.appendChild(t);
      box.appendChild(card);
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
    const stopped = j.state === "stalled" || j.state === "down";
    summary.replaceChildren();
    summary.appendChild(el("span", "", "job " + j.job_id + ": " + j.ranks + " ranks on " + j.nodes.length + " nodes · " +
      (stopped ? "" : "stragglers: " + (j.stragglers.length ? "rank " + j.stragglers.join(", ") : "none"))));
    svg.classList.toggle("stopped", stopped);
    if (stopped) {
      const warn = el("strong", "stopped-note", "the job is " + j.state + " since ");
      warn.appendChild(timeEl("span", j.since));
      warn.appendChild(document.createTextNode(": these scores are from before it stopped"));
      summary.appendChild(warn);
    }
    const scores = data.scores;
    if (!scores.length) return;
    const W = 900, H = 220, pad = 28;
    const top = Math.max(1.5, ...scores.map((s) => s.score)) * 1.05;
    const bw = (W - 2 * pad) / scores.length;
    const y = (v) => H - pad - (v / top) * (H - 2 * pad);
    const strag = new Set(j.stragglers);
    scores.forEach((s, i) => {
      const r = document.createElementNS(SVG, "rect");
      r.setAttribute("class", "bar" + (strag.has(s.rank) ? " straggler" : "") + (stopped ? " stopped" : ""));
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
    const rate = a.prior ? "prior: 1 failure per " + fmt(1 / (a.failures_per_node_hour * 24), 0, " node-days") :
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

  let sharded = false;

  // A sharded replica says which share it analyzes ("shard K of N, owning X jobs / Y nodes").
  function renderShard(shard) {
    const span = document.getElementById("shard");
    sharded = !!shard;
    span.hidden = !shard;
    span.textContent = shard ? shard.text : "";
  }

  async function refresh() {
    try {
      if (sharded) {
        const st = await getJSON("api/v1/status");
        if (st.ok) renderShard(st.body.shard);
      }
      const nodes = await getJSON("api/v1/nodes");
      if (!nodes.ok) {
        renderBanner(nodes.body.status || null, null);
        document.getElementById("summary").textContent =
          nodes.status === 401 ? "unauthorized" : nodes.status === 503 ? "waiting for the first analysis" : "error " + nodes.status;
        return;
      }
      // Relative times count from the analysis' end, so a page of stale verdicts stays consistent.
      nowMs = Date.parse(nodes.body.window.end) || Date.now();
      const [findings, jobs, models] = await Promise.all(
        [getJSON("api/v1/findings"), getJSON("api/v1/jobs"), getJSON("api/v1/models")]);
      if (jobs.ok) renderJobTable(jobs.body.jobs);
      renderBanner(nodes.body.status, nodes.body.counts);
      renderGrid(nodes.body.nodes, nodes.body.status.stale);
      if (findings.ok) renderFindings(findings.body.findings);
      const nJobs = jobs.ok ? jobs.body.jobs.length : 0;
      const nModels = models.ok ? models.body.models.length : 0;
      for (const id of ["jobs", "stragglers", "goodput"]) document.getElementById(id).hidden = nJobs === 0;
      document.getElementById("serving").hidden = nModels === 0;
      document.getElementById("no-workload").hidden = nJobs + nModels > 0;
      if (models.ok) renderModels(models.body.models);
      // The state badges' positions, for the screenshot test (as the grid's cells), once visible.
      for (const b of document.querySelectorAll("#jobs-body .badge")) {
        const r = b.getBoundingClientRect();
        b.dataset.rect = [r.left + window.scrollX, r.top + window.scrollY, r.width, r.height].map(Math.round).join(",");
      }
      if (jobs.ok && nJobs) {
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
      if (status.body.runbooks) runbooks = status.body.runbooks;
      renderShard(status.body.shard);
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
