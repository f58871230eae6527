// The sqldelay dashboard: reads and operates the queues through the service's REST API with
// the session cookie; changes carry the page's CSRF token. Text from the database is only
// ever set as textContent, never parsed as HTML.
"use strict";

const CSRF = document.querySelector('meta[name="csrf-token"]').content;
const WRITER = document.querySelector('meta[name="role"]').content === "admin";
const REFRESH_MS = 2000;  // from the end of one refresh to the start of the next
const READ_TIMEOUT_MS = 30000;  // a read that takes longer is given up (and shown)
const PAGE = 25;
const QUEUES_PAGE = 50;

const state = {queue: null, browseAfter: null, deadOffset: 0, deadTotal: 0,
               queuesAfter: null, queuesBefore: [], queuesNext: null, queuesPrefix: ""};

function $(id) { return document.getElementById(id); }

async function api(method, path, body) {
  const init = {method, credentials: "same-origin", headers: {}};
  if (method !== "GET") init.headers["X-CSRF-Token"] = CSRF;
  else init.signal = AbortSignal.timeout(READ_TIMEOUT_MS);
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch("v1/" + path, init);
  if (response.status === 401) { window.location.reload(); throw new Error("signed out"); }
  const data = response.status === 204 ? null : await response.json();
  if (!response.ok) {
    const error = new Error(data && data.error ? data.error.message : response.statusText);
    error.status = response.status;
    throw error;
  }
  return data;
}

function showProblem(error) {
  const p = $("problem");
  p.textContent = error ? String(error.message || error) : "";
  p.hidden = !error;
}

function cell(row, text, className) {
  const td = document.createElement("td");
  td.textContent = text === null || text === undefined ? "" : String(text);
  if (className) td.className = className;
  row.appendChild(td);
  return td;
}

function button(text, onClick) {
  const b = document.createElement("button");
  b.type = "button";
  b.textContent = text;
  b.addEventListener("click", onClick);
  return b;
}

function age(seconds) {
  if (seconds === null || seconds === undefined) return "";
  if (seconds < 60) return seconds.toFixed(1) + " s";
  if (seconds < 3600) return (seconds / 60).toFixed(1) + " min";
  return (seconds / 3600).toFixed(1) + " h";
}

function when(iso) { return iso ? new Date(iso).toLocaleString() : ""; }

function q(name) { return "queues/" + encodeURIComponent(name); }

// ---- the queue list, refreshed live, a page at a time ----------------------------------------

// One read of the list at a time: a refresh asked for while one is running is done once that
// one is over (a slow server is never sent a second read of the list on top of the first).
const queuesRead = {running: null, wanted: false};

function refreshQueues() {
  queuesRead.wanted = true;
  if (!queuesRead.running) {
    queuesRead.running = (async () => {
      try {
        while (queuesRead.wanted) {
          queuesRead.wanted = false;
          await readQueues();
        }
      } finally {
        queuesRead.running = null;
      }
    })();
  }
  return queuesRead.running;
}

async function readQueues() {
  const params = new URLSearchParams({limit: QUEUES_PAGE});
  if (state.queuesPrefix) params.set("prefix", state.queuesPrefix);
  if (state.queuesAfter) params.set("after", state.queuesAfter);
  const page = await api("GET", "queues?" + params);
  const queues = page.queues;
  if (queues.length === 0 && state.queuesBefore.length) {  // the page's queues are gone
    state.queuesAfter = state.queuesBefore.pop();
    return readQueues();
  }
  state.queuesNext = page.next_after;
  $("queues-next").hidden = !page.next_after;
  $("queues-prev").hidden = state.queuesBefore.length === 0;
  const body = $("queues").tBodies[0];
  body.replaceChildren();
  for (const s of queues) {
    const row = document.createElement("tr");
    row.dataset.queue = s.queue;
    row.dataset.type = s.payload_type;
    if (s.queue === state.queue && s.payload_type === "json") row.className = "selected";
    const name = cell(row, "");
    const link = document.createElement("a");
    link.href = "#";
    link.textContent = s.queue;
    link.addEventListener("click", (event) => { event.preventDefault(); select(s.queue); });
    name.appendChild(link);
    cell(row, s.payload_type, "type");
    cell(row, s.due, "due");
    cell(row, s.scheduled, "scheduled");
    cell(row, s.in_flight, "in-flight");
    cell(row, s.dead_letters, "dead");
    cell(row, age(s.oldest_due_age_seconds), "oldest");
    body.appendChild(row);
  }
  $("no-queues").hidden = queues.length > 0 || Boolean(state.queuesPrefix);
  $("refreshed").textContent = "updated " + new Date().toLocaleTimeString();
}

// ---- one queue -------------------------------------------------------------------------------

async function select(name) {
  state.queue = name;
  state.browseAfter = null;
  state.deadOffset = 0;
  $("detail").hidden = false;
  $("detail-name").textContent = name;
  $("lookup-result").textContent = "";
  await Promise.all([refreshDetail(), browse(false), refreshDeadLetters(), refreshChart()]);
  await refreshQueues();
}

async function refreshDetail() {
  if (!state.queue) return;
  const s = await api("GET", q(state.queue));
  $("detail-paused").hidden = !s.paused;
  $("pause").hidden = s.paused;
  $("resume").hidden = !s.paused;
  $("detail-counts").textContent = `${s.due} due · ${s.scheduled} scheduled · ` +
    `${s.in_flight} in flight · ${s.dead_letters} dead letters`;
}

async function setPaused(paused) {
  await api("POST", q(state.queue) + (paused ? "/pause" : "/resume"));
  await refreshDetail();
}

async function lookup(event) {
  event.preventDefault();
  const key = $("lookup-key").value;
  const out = $("lookup-result");
  try {
    const found = await api("GET", q(state.queue) + "/messages/" +
                            key.split("/").map(encodeURIComponent).join("/"));
    const lines = [`state: ${found.state.replace("_", " ")}`, `due: ${when(found.due_at)}`];
    if (found.state === "dead_lettered") {
      lines.push(`attempts: ${found.attempts}`, `failed: ${when(found.failed_at)}`,
                 `last error: ${found.last_error}`);
    } else {
      lines.push(`attempt: ${found.attempt}`);
      if (found.state === "in_flight") {
        lines.push(`locked until: ${when(found.locked_until)}`,
                   `held by: ${found.claimed_by || "?"}`);
      }
    }
    lines.push(`payload: ${JSON.stringify(found.payload)}`);
    out.textContent = lines.join("\n");
  } catch (error) {
    out.textContent = error.status === 404 ? `no message ${key}` : String(error.message);
  }
}

async function browse(next) {
  if (!next) state.browseAfter = null;
  const params = new URLSearchParams({state: $("browse-state").value, limit: PAGE});
  const prefix = $("browse-prefix").value;
  if (prefix) params.set("prefix", prefix);
  if (state.browseAfter) params.set("after", state.browseAfter);
  const page = await api("GET", q(state.queue) + "/messages?" + params);
  const body = $("messages").tBodies[0];
  body.replaceChildren();
  for (const m of page.messages) {
    const row = document.createElement("tr");
    row.dataset.key = m.key;
    cell(row, m.key, "key");
    cell(row, when(m.due_at));
    cell(row, m.attempt);
    cell(row, m.claimed_by);
    cell(row, when(m.locked_until));
    cell(row, JSON.stringify(m.payload), "payload");
    body.appendChild(row);
  }
  state.browseAfter = page.next_after;
  $("browse-next").hidden = !page.next_after;
}

async function refreshDeadLetters() {
  const params = new URLSearchParams({limit: PAGE, offset: state.deadOffset});
  const page = await api("GET", q(state.queue) + "/dead-letters?" + params);
  if (page.dead_letters.length === 0 && state.deadOffset > 0) {
    state.deadOffset = Math.max(0, state.deadOffset - PAGE);
    return refreshDeadLetters();
  }
  state.deadTotal = page.total;
  const body = $("dead-letters").tBodies[0];
  body.replaceChildren();
  for (const d of page.dead_letters) {
    const row = document.createElement("tr");
    row.dataset.id = d.id;
    row.dataset.key = d.key;
    const box = document.createElement("input");
    box.type = "checkbox";
    box.value = d.id;
    box.setAttribute("aria-label", "select " + d.key);
    cell(row, "").appendChild(box);
    cell(row, d.key, "key");
    cell(row, d.attempts);
    cell(row, when(d.failed_at));
    cell(row, d.last_error, "error");
    cell(row, "payload" in d ? JSON.stringify(d.payload) : "(bytes)", "payload");
    const actions = cell(row, "", "writer");
    actions.appendChild(button("Requeue", () => onLetters("requeue", [d.id])));
    actions.appendChild(button("Drop", () => onLetters("drop", [d.id])));
    body.appendChild(row);
  }
  $("select-all").checked = false;
  const last = Math.min(state.deadOffset + PAGE, page.total);
  $("dead-page").textContent = page.total ?
    `${state.deadOffset + 1}–${last} of ${page.total}` : "none";
  $("dead-prev").hidden = state.deadOffset === 0;
  $("dead-next").hidden = last >= page.total;
}

function selectedLetters() {
  return [...$("dead-letters").tBodies[0].querySelectorAll("input:checked")]
    .map((box) => Number(box.value));
}

async function onLetters(action, ids) {
  if (!ids.length) return;
  if (action === "drop" && !window.confirm(`Drop ${ids.length} dead letter(s) for good?`)) {
    return;
  }
  await api("POST", q(state.queue) + "/dead-letters/" + action, {ids});
  await Promise.all([refreshDeadLetters(), refreshDetail(), refreshQueues()]);
}

// ---- the throughput chart: an SVG drawn here -----------------------------------------------

const SVG = "http://www.w3.org/2000/svg";

function svg(tag, attrs, parent) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  if (parent) parent.appendChild(el);
  return el;
}

async function refreshChart() {
  if (!state.queue) return;
  const data = await api("GET", "throughput");
  const points = data.queues[state.queue + "|json"] || [];
  const note = $("chart-note");
  note.textContent = data.problem ||
    `sampled every ${data.every_seconds} s from the event history since the service ` +
    "started (at most the last hour): offered (blue) and acked (green)";
  drawChart($("chart"), points, data.since);
}

function drawChart(box, points, since) {
  // the minutes the service has counted, up to the last hour: before it started there is
  // nothing to draw, not zero
  const W = 600, H = 160, L = 40, B = 20;
  const now = Math.floor(Date.now() / 60000) * 60000;
  const first = Math.max(now - 59 * 60000, since === null ? now : Math.min(since, now));
  const minutes = [];
  for (let m = first; m <= now; m += 60000) minutes.push(m);
  const byMinute = new Map(points.map(([m, offered, acked]) => [m, [offered, acked]]));
  const series = minutes.map((m) => byMinute.get(m) || [0, 0]);
  const top = Math.max(1, ...series.flat());
  const root = svg("svg", {viewBox: `0 0 ${W} ${H}`, width: "100%", class: "chart"});
  const x = (i) => L + (i * (W - L - 5)) / Math.max(1, minutes.length - 1);
  const y = (v) => H - B - (v * (H - B - 10)) / top;
  svg("line", {x1: L, y1: y(0), x2: W - 5, y2: y(0), class: "axis"}, root);
  svg("line", {x1: L, y1: y(0), x2: L, y2: y(top), class: "axis"}, root);
  const label = (text, attrs) => { svg("text", attrs, root).textContent = text; };
  label(String(top), {x: L - 4, y: y(top) + 4, "text-anchor": "end"});
  label("0", {x: L - 4, y: y(0) + 4, "text-anchor": "end"});
  label(`−${minutes.length - 1} min`, {x: L, y: H - 4});
  label("now", {x: W - 5, y: H - 4, "text-anchor": "end"});
  [["offered", 0], ["acked", 1]].forEach(([name, index]) => {
    const d = series.map((v, i) => `${i ? "L" : "M"}${x(i).toFixed(1)},${y(v[index]).toFixed(1)}`);
    svg("path", {d: d.join(" "), class: "line " + name}, root);
  });
  box.replaceChildren(root);
  box.dataset.offered = series.reduce((n, v) => n + v[0], 0);
  box.dataset.acked = series.reduce((n, v) => n + v[1], 0);
}

// ---- wiring ----------------------------------------------------------------------------------

function guarded(fn) {
  return async (...args) => {
    try {
      await fn(...args);
      showProblem(null);
    } catch (error) {
      showProblem(error);
    }
  };
}

async function tick() {
  await refreshQueues();
  if (state.queue) await Promise.all([refreshDetail(), refreshChart()]);
}

document.addEventListener("DOMContentLoaded", () => {
  document.body.classList.toggle("read-only", !WRITER);
  $("pause").addEventListener("click", guarded(() => setPaused(true)));
  $("resume").addEventListener("click", guarded(() => setPaused(false)));
  $("lookup").addEventListener("submit", guarded(lookup));
  $("browse").addEventListener("submit", guarded((event) => {
    event.preventDefault();
    return browse(false);
  }));
  $("browse-next").addEventListener("click", guarded(() => browse(true)));
  $("requeue-selected").addEventListener("click",
    guarded(() => onLetters("requeue", selectedLetters())));
  $("drop-selected").addEventListener("click",
    guarded(() => onLetters("drop", selectedLetters())));
  $("select-all").addEventListener("change", (event) => {
    for (const box of $("dead-letters").tBodies[0].querySelectorAll("input")) {
      box.checked = event.target.checked;
    }
  });
  $("dead-prev").addEventListener("click", guarded(() => {
    state.deadOffset = Math.max(0, state.deadOffset - PAGE);
    return refreshDeadLetters();
  }));
  $("dead-next").addEventListener("click", guarded(() => {
    state.deadOffset += PAGE;
    return refreshDeadLetters();
  }));
  $("queues-next").addEventListener("click", guarded(() => {
    state.queuesBefore.push(state.queuesAfter);
    state.queuesAfter = state.queuesNext;
    return refreshQueues();
  }));
  $("queues-prev").addEventListener("click", guarded(() => {
    state.queuesAfter = state.queuesBefore.pop() || null;
    return refreshQueues();
  }));
  $("queues-filter").addEventListener("submit", guarded((event) => {
    event.preventDefault();
    state.queuesPrefix = $("queues-prefix").value;
    state.queuesAfter = null;
    state.queuesBefore = [];
    return refreshQueues();
  }));
  // the next refresh starts REFRESH_MS after the last one ended: never two at once
  const refresh = guarded(tick);
  (async function poll() {
    await refresh();
    setTimeout(poll, REFRESH_MS);
  })();
});
