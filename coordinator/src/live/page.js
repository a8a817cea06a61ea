// The live view's page: follows /events (server-sent events, one `state` JSON per change) and
// draws it. No library: the machines that run the fleet may be offline.
"use strict";

const $ = (id) => document.getElementById(id);
// The plots' palette (plots.rs PALETTE; a test keeps the two equal): Okabe and Ito's for
// colour-blind readers, without its yellow and black, and Tol's wine.
const COLORS = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#882255"];
const SVG = "http://www.w3.org/2000/svg";
let last = null;
let received = 0;
let dendrogramShown = false;

function text(el, s) { if (el.textContent !== s) el.textContent = s; }
function pct(a) { return a == null ? "–" : (100 * a).toFixed(2) + " %"; }
function bytes(n) {
  if (n == null) return "n/a";
  const u = ["B", "KB", "MB", "GB"]; let i = 0;
  while (n >= 1000 && i < u.length - 1) { n /= 1000; i++; }
  return (i ? n.toFixed(1) : n) + " " + u[i];
}
function cell(tr, value, cls) {
  const td = document.createElement("td");
  if (cls) td.className = cls;
  td.textContent = value;
  tr.appendChild(td);
  return td;
}

function drawHeader(s) {
  text($("run"), s.run_id || s.runtime);
  text($("algorithm"), s.algorithm);
  text($("round"), String(s.round));
  text($("rounds-planned"), String(s.rounds_planned));
  text($("clusters"), s.clusters ? String(s.clusters) : "–");
  text($("bytes"), s.bytes_up == null ? "n/a" : bytes(s.bytes_up) + " / " + bytes(s.bytes_down));
  if (s.outcome) {
    $("conn").className = "conn " + (s.outcome === "finished" ? "ok" : "bad");
    text($("conn"), s.outcome);
  }
}

function drawPhase(s) {
  const p = s.phase;
  if (!p) {
    text($("phase"), "joining");
    text($("phase-detail"), s.clients.length + " client(s) joined");
    $("phase-bar").style.width = "0";
    return;
  }
  const name = p.kind === "finished" ? (s.outcome || "finished") : p.kind + " (round " + p.round + ")";
  text($("phase"), name);
  const frac = p.kind === "finished" ? 1 : (p.asked ? p.answered / p.asked : 0);
  $("phase-bar").style.width = (100 * frac).toFixed(1) + "%";
  text($("phase-detail"), p.kind === "finished" ? "" :
    p.answered + " of " + p.asked + " answered · " + p.seconds.toFixed(0) + " s");
}

function drawClients(s) {
  text($("client-count"), "(" + s.clients.length + ")");
  text($("counts"), Object.entries(s.counts).filter(([, n]) => n > 0)
    .map(([k, n]) => k.replace("_", " ") + " " + n).join(" · "));
  const body = $("clients").tBodies[0];
  const rows = new Map([...body.rows].map((r) => [r.dataset.client, r]));
  s.clients.forEach((c, i) => {
    let tr = rows.get(c.id);
    if (!tr) {
      tr = document.createElement("tr");
      tr.dataset.client = c.id;
    }
    rows.delete(c.id);
    tr.dataset.state = c.state;
    tr.replaceChildren();
    cell(tr, c.id);
    const st = cell(tr, "");
    const span = document.createElement("span");
    span.className = "state " + c.state;
    span.textContent = c.state.replace("_", " ");
    st.appendChild(span);
    cell(tr, c.cluster == null ? "–" : String(c.cluster), "num");
    cell(tr, String(c.answers), "num");
    cell(tr, bytes(c.bytes_up), "num");
    cell(tr, String(c.rejected), "num");
    if (body.rows[i] !== tr) body.insertBefore(tr, body.rows[i] || null);
  });
  rows.forEach((r) => r.remove());
}

// Accuracy per round: the mean (thick) and each cluster (thin), on an axis from the decade below
// the lowest value drawn to 100 %.
function drawAccuracy(s) {
  const pts = s.accuracy;
  const box = $("accuracy");
  if (!pts.length) return;
  // R leaves room for the last round's point and label.
  const W = 640, H = 320, L = 48, R = 18, T = 12, B = 34;
  const values = pts.flatMap((p) => [p.mean, ...p.clusters.filter((a) => a != null)]);
  const lo = Math.max(0, Math.floor(Math.min(...values) * 10) / 10 - 0.05);
  const maxRound = Math.max(s.rounds_planned, ...pts.map((p) => p.round), 1);
  const x = (r) => L + (W - L - R) * (r / maxRound);
  const y = (a) => T + (H - T - B) * (1 - (a - lo) / (1 - lo));
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("role", "img");
  const el = (name, attrs, content) => {
    const e = document.createElementNS(SVG, name);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (content != null) e.textContent = content;
    svg.appendChild(e);
    return e;
  };
  // Ticks at whole steps of 5, 10 or 20 %, three to eight of them.
  const span = 1 - lo;
  const tick = span > 0.6 ? 0.2 : span > 0.3 ? 0.1 : 0.05;
  for (let k = Math.ceil(lo / tick - 1e-9); k * tick <= 1 + 1e-9; k++) {
    const a = k * tick;
    el("line", { x1: L, x2: W - R, y1: y(a), y2: y(a), stroke: "#e6e8ee" });
    el("text", { x: L - 6, y: y(a) + 4, "text-anchor": "end", "font-size": 11, fill: "#6b7385", "data-tick": "y" }, (100 * a).toFixed(0) + "%");
  }
  const step = Math.max(1, Math.ceil(maxRound / 10));
  for (let r = 0; r <= maxRound; r += step) {
    el("text", { x: x(r), y: H - B + 16, "text-anchor": "middle", "font-size": 11, fill: "#6b7385" }, String(r));
  }
  el("text", { x: (L + W - R) / 2, y: H - 4, "text-anchor": "middle", "font-size": 11, fill: "#6b7385" }, "round");
  const nClusters = Math.max(0, ...pts.map((p) => p.clusters.length));
  const legend = [];
  if (nClusters > 1 && nClusters <= 20) {
    for (let k = 0; k < nClusters; k++) {
      const line = pts.filter((p) => p.clusters[k] != null).map((p) => `${x(p.round)},${y(p.clusters[k])}`);
      if (!line.length) continue;
      const color = COLORS[k % COLORS.length];
      el("polyline", { points: line.join(" "), fill: "none", stroke: color, "stroke-width": 1.5, "data-series": "cluster-" + k });
      legend.push([color, "cluster " + k + " " + pct(pts.filter((p) => p.clusters[k] != null).slice(-1)[0].clusters[k])]);
    }
  }
  el("polyline", { points: pts.map((p) => `${x(p.round)},${y(p.mean)}`).join(" "), fill: "none", stroke: "#1d2330", "stroke-width": 3, "data-series": "mean" });
  for (const p of pts) el("circle", { cx: x(p.round), cy: y(p.mean), r: 3.5, fill: "#1d2330" });
  legend.unshift(["#1d2330", "mean " + pct(pts[pts.length - 1].mean)]);
  box.replaceChildren(svg);
  const lg = $("legend");
  lg.replaceChildren(...legend.map(([c, t]) => {
    const span = document.createElement("span");
    const i = document.createElement("i");
    i.style.background = c;
    span.append(i, t);
    return span;
  }));
}

function drawDendrogram(s) {
  if (!s.has_dendrogram || dendrogramShown) return;
  dendrogramShown = true;
  const img = document.createElement("img");
  img.src = "dendrogram.svg?v=" + s.version;
  img.alt = "dendrogram" + (s.cut ? ", cut at " + s.cut.threshold.toFixed(4) + " (" + s.cut.linkage + ")" : "");
  $("dendrogram").replaceChildren(img);
}

function drawRejections(s) {
  const total = Object.values(s.rejected).reduce((a, b) => a + b, 0);
  text($("rejected-total"), "(" + total + ")");
  const body = $("rejections").tBodies[0];
  body.replaceChildren(...s.rejections.slice().reverse().map((r) => {
    const tr = document.createElement("tr");
    cell(tr, r.at.toFixed(1), "num");
    cell(tr, r.context);
    cell(tr, r.client);
    cell(tr, r.what);
    cell(tr, r.reason);
    cell(tr, r.detail);
    return tr;
  }));
}

function draw(s) {
  last = s;
  received++;
  document.body.dataset.version = String(s.version);
  document.body.dataset.received = String(received);
  drawHeader(s);
  drawPhase(s);
  drawClients(s);
  drawAccuracy(s);
  drawDendrogram(s);
  drawRejections(s);
}

function connect() {
  const es = new EventSource("events");
  es.addEventListener("state", (e) => {
    $("conn").className = "conn ok";
    text($("conn"), "live");
    try { draw(JSON.parse(e.data)); } catch (err) { console.error(err); }
  });
  es.onerror = () => {
    // After the run its server goes too: the header keeps saying how it ended.
    if (last && last.outcome) return drawHeader(last);
    $("conn").className = "conn bad";
    text($("conn"), "reconnecting…");
  };
}

// The phase's clock ticks between events.
setInterval(() => {
  if (last && last.phase && last.phase.kind !== "finished") {
    last.phase.seconds += 1;
    drawPhase(last);
  }
}, 1000);

connect();
