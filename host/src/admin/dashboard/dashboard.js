// The mailer dashboard: polls /dashboard/snapshot every second and draws
// the pipeline graph, throughput and latency charts, checkpoints, source
// lag and the plugins (with swap and rollback through the token-guarded
// API). Everything it loads comes from the admin server itself.
"use strict";

const POLL_MS = 1000;
const SAMPLES = 60;
const SVG = "http://www.w3.org/2000/svg";
const series = { throughput: [], latency: [] };
let previous = null;

function $(id) { return document.getElementById(id); }

function el(name, attrs, text) {
  const e = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

function storedToken() { return sessionStorage.getItem("mailer-token"); }

function askToken() {
  const t = window.prompt("The admin token of this pipeline:");
  if (t) sessionStorage.setItem("mailer-token", t.trim());
  return t;
}

function headers(extra) {
  const h = Object.assign({}, extra || {});
  const t = storedToken();
  if (t) h["Authorization"] = "Bearer " + t;
  return h;
}

function number(n) { return Math.round(n).toLocaleString("en"); }

// Green when empty, yellow half full, red when full.
function fillColour(fill) {
  const f = Math.max(0, Math.min(1, fill));
  const from = f < 0.5 ? [46, 157, 90] : [224, 179, 42];
  const to = f < 0.5 ? [224, 179, 42] : [210, 69, 47];
  const t = f < 0.5 ? f * 2 : (f - 0.5) * 2;
  const c = from.map((a, i) => Math.round(a + (to[i] - a) * t));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}

function drawGraph(snap, rates) {
  const svg = $("graph");
  svg.replaceChildren();
  const width = svg.clientWidth || 1000;
  // The graph in columns: a stage's column is the longest path to it from
  // a source; the side outputs (no edges) get a row of their own below.
  const column = {};
  for (const s of snap.stages) {
    if (snap.edges.some(e => e.from === s.name || e.to === s.name)) column[s.name] = 0;
  }
  for (let moved = true; moved;) {
    moved = false;
    for (const e of snap.edges) {
      if (column[e.to] < column[e.from] + 1) { column[e.to] = column[e.from] + 1; moved = true; }
    }
  }
  const main = snap.stages.map(s => s.name).filter(n => n in column);
  const side = snap.stages.map(s => s.name).filter(n => !(n in column));
  const byName = Object.fromEntries(snap.stages.map(s => [s.name, s]));
  const columns = Math.max(side.length, 1 + Math.max(0, ...Object.values(column)));
  const rows = [];
  const gap = 40;
  const w = Math.min(170, (width - gap * (columns + 1)) / Math.max(1, columns));
  const pos = {};
  for (const name of main) {
    const c = column[name];
    rows[c] = (rows[c] || 0) + 1;
    pos[name] = { x: gap + c * (w + gap), y: 20 + (rows[c] - 1) * 80 };
  }
  const sideY = 20 + Math.max(1, ...rows.filter(Boolean)) * 80 + 20;
  side.forEach((name, i) => { pos[name] = { x: gap + i * (w + gap), y: sideY }; });
  svg.style.height = `${(side.length ? sideY + 60 : sideY - 20) + 10}px`;
  for (const e of snap.edges) {
    const a = pos[e.from], b = pos[e.to];
    if (!a || !b) continue;
    const fill = e.capacity ? e.queued / e.capacity : 0;
    const line = el("line", {
      x1: a.x + w, y1: a.y + 30, x2: b.x, y2: b.y + 30,
      stroke: fillColour(fill), "stroke-width": 6,
      "data-from": e.from, "data-to": e.to, "data-fill": fill.toFixed(2),
    });
    line.appendChild(el("title", {}, `${e.from} → ${e.to}: ${e.queued}/${e.capacity} batches queued (${e.queued_records} records), ${e.blocked_seconds.toFixed(2)} s blocked`));
    svg.appendChild(line);
  }
  for (const name of [...main, ...side]) {
    const s = byName[name];
    if (!s) continue;
    const p = pos[name];
    const g = el("g", { class: "node", "data-stage": name, transform: `translate(${p.x},${p.y})` });
    g.appendChild(el("rect", { width: w, height: 60 }));
    g.appendChild(el("text", { class: "name", x: 8, y: 18 }, name));
    const ops = s.operators.length ? s.operators.join(", ") : "";
    g.appendChild(el("text", { x: 8, y: 34 }, `${s.workers} worker${s.workers === 1 ? "" : "s"} ${ops}`.slice(0, 40)));
    const rate = rates[name];
    g.appendChild(el("text", { x: 8, y: 50 }, `${number(s.records_out)} out` + (rate === undefined ? "" : ` · ${number(rate)}/s`)));
    svg.appendChild(g);
  }
}

function drawChart(id, values, unit) {
  const svg = $(id);
  svg.replaceChildren();
  const width = svg.clientWidth || 500, height = svg.clientHeight || 140;
  const max = Math.max(1e-9, ...values);
  const points = values.map((v, i) => {
    const x = (i / Math.max(1, SAMPLES - 1)) * (width - 10) + 5;
    const y = height - 15 - (v / max) * (height - 30);
    return `${x.toFixed(1)},${y.toFixed(1)}`;
  });
  svg.appendChild(el("polyline", { points: points.join(" ") }));
  svg.appendChild(el("text", { x: 5, y: 12 }, `max ${max < 10 ? max.toFixed(3) : number(max)} ${unit}`));
  svg.setAttribute("data-values", values.map(v => v.toFixed(3)).join(" "));
}

function push(list, value) {
  list.push(value);
  if (list.length > SAMPLES) list.shift();
}

function fillTable(id, rows) {
  const body = $(id).querySelector("tbody");
  body.replaceChildren(...rows.map(cells => {
    const tr = document.createElement("tr");
    for (const c of cells) {
      const td = document.createElement("td");
      if (c instanceof Node) td.appendChild(c); else td.textContent = c;
      tr.appendChild(td);
    }
    return tr;
  }));
}

function render(snap) {
  $("pipeline").textContent = snap.pipeline;
  const rates = {};
  // The sinks: stages an edge enters and none leaves.
  const sinks = snap.stages.filter(s => snap.edges.some(e => e.to === s.name) && !snap.edges.some(e => e.from === s.name));
  if (previous) {
    const dt = (snap.at_ms - previous.at_ms) / 1000;
    if (dt > 0) {
      for (const s of snap.stages) {
        const before = previous.stages.find(p => p.name === s.name);
        if (before) rates[s.name] = (s.records_out - before.records_out) / dt;
      }
      push(series.throughput, sinks.reduce((a, s) => a + (rates[s.name] || 0), 0));
      const calls = snap.operators.reduce((a, o) => a + o.calls, 0) - previous.operators.reduce((a, o) => a + o.calls, 0);
      const secs = snap.operators.reduce((a, o) => a + o.call_seconds, 0) - previous.operators.reduce((a, o) => a + o.call_seconds, 0);
      push(series.latency, calls > 0 ? (secs / calls) * 1000 : 0);
    }
  }
  previous = snap;
  drawGraph(snap, rates);
  const tp = $("throughput");
  tp.setAttribute("data-records", sinks.reduce((a, s) => a + s.records_out, 0));
  $("throughput-value").textContent = series.throughput.length ? `${number(series.throughput.at(-1))} rec/s` : "–";
  drawChart("throughput", series.throughput, "rec/s");
  $("latency-value").textContent = series.latency.length ? `${series.latency.at(-1).toFixed(3)} ms/call` : "–";
  drawChart("latency", series.latency, "ms");
  fillTable("checkpoints", snap.checkpoints.slice(-10).reverse().map(c => [
    c.id, c.ok ? "ok" : `failed: ${c.reason}`, c.seconds.toFixed(3),
    number(c.bytes) + (c.uploaded_bytes === undefined ? "" : ` (${number(c.uploaded_bytes)} uploaded)`),
    new Date(c.ended_at_ms).toLocaleTimeString(),
  ]));
  $("watermark").textContent = snap.watermark_ms === null ? "none yet" : new Date(snap.watermark_ms).toISOString();
  const p = snap.progress;
  $("progress").textContent = p ? `Read ${number(p.records)}${p.records_total ? " of " + number(p.records_total) : ""} records` +
    (p.bytes_total ? ` (${(100 * p.bytes / Math.max(1, p.bytes_total)).toFixed(1)}% of the bytes)` : "") : "";
  fillTable("lag", snap.lag.map(l => [l.split, number(l.records)]));
  $("tasks-section").hidden = snap.tasks.length === 0;
  fillTable("tasks", snap.tasks.map(t => [
    t.name, number(t.records),
    t.restoring ? `restoring: ${number(t.restored)} of ${number(t.to_restore)} changelog records`
      : t.restored ? `running (restored ${number(t.restored)} records)` : "running",
  ]));
  const rows = [];
  for (const pl of snap.plugins) {
    rows.push([pl.operator, pl.name, pl.version || "–", pl.world, pl.digest.slice(0, 12), buttons(pl.operator)]);
    if (pl.canary) rows.push(canaryRow(pl.canary));
  }
  fillTable("plugins", rows);
}

// A running canary beside the current version: each one's rate and failures.
function canaryRow(c) {
  const secs = Math.max(c.elapsed_ms, 1) / 1000;
  const side = (what, records, failures) =>
    `${what}: ${number(records / secs)} rec/s, ${number(failures)} failed of ${number(records)}`;
  return [
    "↳ canary", c.plugin.name, c.plugin.version || "–",
    `key groups 0–${c.key_groups_canary - 1} of ${c.key_groups}`, c.plugin.digest.slice(0, 12),
    `${side("canary", c.records, c.failures)} | ${side("current", c.current_records, c.current_failures)}`,
  ];
}

function buttons(operator) {
  const span = document.createElement("span");
  const swap = document.createElement("button");
  swap.textContent = "Swap…";
  swap.onclick = () => {
    const input = $("upload");
    input.onchange = async () => {
      const file = input.files[0];
      input.value = "";
      if (file) await act(`/api/operators/${encodeURIComponent(operator)}/swap`, await file.arrayBuffer());
    };
    input.click();
  };
  const back = document.createElement("button");
  back.textContent = "Roll back";
  back.onclick = () => act(`/api/operators/${encodeURIComponent(operator)}/rollback`, null);
  span.append(swap, back);
  return span;
}

// A swap or rollback: asks for the token first if there is none.
async function act(url, body) {
  if (!storedToken() && !askToken()) return;
  const init = { method: "POST", headers: headers(body ? { "Content-Type": "application/wasm" } : {}) };
  if (body) init.body = body;
  let res = await fetch(url, init);
  if (res.status === 401 && askToken()) {
    init.headers = headers(body ? { "Content-Type": "application/wasm" } : {});
    res = await fetch(url, init);
  }
  const answer = await res.json().catch(() => ({}));
  $("action").textContent = res.ok ? `Swap ${answer.id} requested: ${answer.operator} → ${answer.to.slice(0, 12)}` : `Refused (${res.status}): ${answer.error || ""}`;
}

async function poll() {
  try {
    let res = await fetch("/dashboard/snapshot", { headers: headers() });
    if (res.status === 401 && askToken()) res = await fetch("/dashboard/snapshot", { headers: headers() });
    if (!res.ok) throw new Error(`HTTP ${res.status}`);
    render(await res.json());
    $("status").textContent = "live";
  } catch (e) {
    $("status").textContent = `disconnected (${e.message})`;
  }
}

poll();
setInterval(poll, POLL_MS);
