// The sqldelay dashboard: reads and operates the queues through the service's REST API with
// the session cookie; changes carry the page's CSRF token. Text from the database is only
// ever set as textContent, never parsed as HTML.
//
// Three views, by the address's fragment: the queues (#), a queue (#queue=NAME) and a
// message with its timeline (#queue=NAME&key=KEY), so each can be linked to and the browser's
// Back button goes back.
"use strict";

const CSRF = document.querySelector('meta[name="csrf-token"]').content;
const WRITER = document.querySelector('meta[name="role"]').content === "admin";
const REFRESH_MS = 2000;  // from the end of one refresh to the start of the next
const READ_TIMEOUT_MS = 30000;  // a read that takes longer is given up (and shown)
const PAGE = 25;
const QUEUES_PAGE = 50;
const MINUTE = 60000;

const state = {view: "queues", queue: null, key: null, opening: false, browseAfter: null,
               deadOffset: 0, deadTotal: 0, queuesAfter: null, queuesBefore: [],
               queuesNext: null, queuesPrefix: ""};

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
    error.code = data && data.error ? data.error.code : null;
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

function badge(text, className) {
  const b = document.createElement("span");
  b.className = "badge " + (className || "");
  b.textContent = text;
  return b;
}

function age(seconds) {
  if (seconds === null || seconds === undefined) return "";
  if (seconds < 60) return seconds.toFixed(1) + " s";
  if (seconds < 3600) return (seconds / 60).toFixed(1) + " min";
  return (seconds / 3600).toFixed(1) + " h";
}

// times in the browser's language and time zone, the zone always named
const DATE_TIME = new Intl.DateTimeFormat(undefined, {
  year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit",
  second: "2-digit", timeZoneName: "short"});
const TIME = new Intl.DateTimeFormat(undefined, {hour: "2-digit", minute: "2-digit",
                                                 second: "2-digit", timeZoneName: "short"});
const CLOCK = new Intl.DateTimeFormat(undefined, {hour: "2-digit", minute: "2-digit"});
// a timeline's events may be milliseconds apart
const PRECISE = new Intl.DateTimeFormat(undefined, {
  year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit",
  second: "2-digit", fractionalSecondDigits: 3, timeZoneName: "short"});

// an RFC 3339 time to a Date (its fraction cut to milliseconds, all ECMAScript promises to read)
function instant(iso) { return new Date(iso.replace(/(\.\d{3})\d+/, "$1")); }

function when(iso, format) { return iso ? (format || DATE_TIME).format(instant(iso)) : ""; }

// a time in a cell: as the browser's locale writes it, with the exact instant (UTC) on hover
function timeCell(row, iso, format) {
  const td = cell(row, when(iso, format), "time");
  if (iso) td.title = iso;
  return td;
}

// the UTC times the library writes into an event's detail, in the browser's zone as well
const ISO_TIME = /\b\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})/g;

function localTimes(text) {
  return text === null || text === undefined ? text :
    String(text).replace(ISO_TIME, (iso) => {
      const date = instant(iso);
      return Number.isNaN(date.getTime()) ? iso : PRECISE.format(date);
    });
}

function q(name) { return "queues/" + encodeURIComponent(name); }

// the key in one path segment: its slashes sent as %2F, so a key ending in "/history" is
// read as the key it is
function messagePath(queue, key) { return q(queue) + "/messages/" + encodeURIComponent(key); }

function showJson(value) { return JSON.stringify(value); }

// ---- errors: the message on one line, the traceback folded behind it ------------------------

function errorParts(text) {
  const lines = String(text).replace(/\s+$/, "").split("\n");
  if (lines.length > 1 && lines[0].startsWith("Traceback (most recent call last)")) {
    // Python's own order (traceback.format_exc()): the message comes last
    let last = lines.length - 1;
    while (last > 0 && !lines[last].trim()) last -= 1;
    return {head: lines[last], rest: lines.slice(0, last).join("\n")};
  }
  // the worker's order: the message first (it survives truncation), then where it came from
  return {head: lines[0], rest: lines.slice(1).join("\n")};
}

// ``fold`` names the fold, to unfold it again when its page is drawn anew
function folded(text, fold) {
  const {head, rest} = errorParts(text === null || text === undefined ? "" : text);
  if (!rest.trim()) {
    const span = document.createElement("span");
    span.className = "error-line";
    span.textContent = head;
    return span;
  }
  const details = document.createElement("details");
  details.className = "folded";
  if (fold) details.dataset.fold = fold;
  const summary = document.createElement("summary");
  summary.textContent = head;
  const pre = document.createElement("pre");
  pre.textContent = rest;
  details.append(summary, pre);
  return details;
}

// ---- reads of one part of the page, overtaking each other -----------------------------------

// Two reads of one part of the page can be on their way at once (a queue opened, and "Show"
// clicked before its first list came back; a refresh and a click): the part is drawn from the
// read asked for last, and an earlier one that comes back after it is dropped.
const lastRead = {};

function reading(part) {
  const ticket = (lastRead[part] || 0) + 1;
  lastRead[part] = ticket;
  return () => lastRead[part] === ticket;  // true while no later read of the part was asked
}

// ---- where the page is: the address's fragment ----------------------------------------------

function fragment(queue, key) {
  const params = new URLSearchParams();
  if (queue !== null && queue !== undefined) params.set("queue", queue);
  if (key !== null && key !== undefined) params.set("key", key);
  return "#" + params;
}

function go(queue, key) {
  const target = fragment(queue, key);
  if ((window.location.hash || "#") === target) return route();  // the same: read it again
  window.location.hash = target;  // hashchange routes
  return null;
}

function link(text, queue, key) {
  const a = document.createElement("a");
  a.href = fragment(queue, key);
  a.textContent = text;
  a.addEventListener("click", (event) => {
    if (event.ctrlKey || event.metaKey || event.shiftKey || event.button !== 0) return;
    event.preventDefault();
    guarded(() => go(queue, key))();
  });
  return a;
}

async function route() {
  const params = new URLSearchParams(window.location.hash.slice(1));
  const queue = params.get("queue");
  const key = params.get("key");
  $("queues-section").hidden = Boolean(queue && key !== null);
  $("detail").hidden = !queue || key !== null;
  $("message").hidden = !(queue && key !== null);
  if (queue && key !== null) {
    state.view = "message";
    state.queue = queue;
    state.key = key;
    return showMessage();
  }
  state.key = null;
  if (queue) {
    state.view = "queue";
    state.queue = queue;
    return select(queue);
  }
  state.view = "queues";
  state.queue = null;
  return refreshQueues();
}

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

function limitsText(s) {
  const parts = [];
  if (s.rate_limit !== null && s.rate_limit !== undefined) {
    parts.push(`${s.rate_limit} / ${s.rate_period_seconds} s`);
  }
  if (s.concurrency_limit !== null && s.concurrency_limit !== undefined) {
    parts.push(`≤ ${s.concurrency_limit} in flight`);
  }
  return parts.join(" · ");
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
    const json = s.payload_type === "json";
    if (s.queue === state.queue && json) row.className = "selected";
    const name = cell(row, "", "name");
    if (json) {
      name.appendChild(link(s.queue, s.queue));
    } else {  // the service reads and writes JSON payloads only
      name.textContent = s.queue;
      name.title = `payloads of type ${s.payload_type}: the service operates JSON queues`;
    }
    if (s.paused) name.append(" ", badge("paused", "warn paused"));
    cell(row, s.payload_type, "type");
    cell(row, s.due, "due");
    cell(row, s.scheduled, "scheduled");
    cell(row, s.in_flight, "in-flight");
    cell(row, s.dead_letters, "dead");
    cell(row, age(s.oldest_due_age_seconds), "oldest");
    cell(row, limitsText(s), "limits");
    body.appendChild(row);
  }
  $("no-queues").hidden = queues.length > 0 || Boolean(state.queuesPrefix);
  $("refreshed").textContent = "updated " + TIME.format(new Date());
}

// ---- one queue -------------------------------------------------------------------------------

async function select(name) {
  const opened = reading("queue");
  // a queue still opening is opened again as another: routed twice (the page's first route
  // and the hashchange of an address changed while it loaded), the second route showed
  // what the first had drawn so far
  const another = state.opening || name !== $("detail-name").textContent;
  if (another) {
    $("lookup-result").textContent = "";
    for (const id of ["rate-limit", "concurrency-limit"]) $(id).value = "";
    // another queue is shown once its reads are in: drawn a part at a time, what came first
    // would move under the pointer as the parts above it come in (and no refresh reads a part
    // again meanwhile, which would leave the part to be drawn after it is shown)
    $("detail").hidden = true;
  }
  state.opening = another;
  state.browseAfter = null;
  state.deadOffset = 0;
  $("detail-name").textContent = name;
  try {
    // every read settled before the queue is shown, a failed one too (then said, above it)
    const reads = await Promise.allSettled([refreshDetail(), browse(false),
                                            refreshDeadLetters(), refreshChart()]);
    const failed = reads.find((read) => read.status === "rejected");
    if (failed) throw failed.reason;
  } finally {
    if (opened()) {
      state.opening = false;
      if (state.view === "queue" && state.queue === name) $("detail").hidden = false;
    }
  }
  await refreshQueues();
}

async function refreshDetail() {
  if (state.view !== "queue") return;
  const latest = reading("detail");
  let s;
  try {
    s = await api("GET", q(state.queue));
  } catch (error) {
    if (error.status !== 404) throw error;
    // nothing under that name (any more): no messages, dead letters, pause or limits
    s = {due: 0, scheduled: 0, in_flight: 0, dead_letters: 0, paused: false,
         rate_limit: null, concurrency_limit: null};
  }
  if (!latest()) return;
  $("detail-paused").hidden = !s.paused;
  $("pause").hidden = s.paused;
  $("resume").hidden = !s.paused;
  $("detail-counts").textContent = `${s.due} due · ${s.scheduled} scheduled · ` +
    `${s.in_flight} in flight · ${s.dead_letters} dead letters`;
  const limits = [];
  limits.push(s.rate_limit === null ? "no rate limit" :
    `rate limit: ${s.rate_limit} claims per ${s.rate_period_seconds} s`);
  limits.push(s.concurrency_limit === null ? "no concurrency limit" :
    `concurrency limit: ${s.concurrency_limit} in flight`);
  $("detail-limits").textContent = limits.join(" · ");
  $("rate-limit").placeholder = s.rate_limit === null ? "none" : String(s.rate_limit);
  $("concurrency-limit").placeholder = s.concurrency_limit === null ? "none" :
    String(s.concurrency_limit);
  $("rate-lift").disabled = s.rate_limit === null;
  $("concurrency-lift").disabled = s.concurrency_limit === null;
}

async function control(method, path, body) {
  await api(method, q(state.queue) + path, body);
  await Promise.all([refreshDetail(), refreshQueues()]);
}

async function setRateLimit(event) {
  event.preventDefault();
  await control("PUT", "/rate-limit", {limit: Number($("rate-limit").value),
                                       per_seconds: Number($("rate-per").value)});
  $("rate-limit").value = "";
}

async function setConcurrencyLimit(event) {
  event.preventDefault();
  await control("PUT", "/concurrency-limit", {limit: Number($("concurrency-limit").value)});
  $("concurrency-limit").value = "";
}

async function lookup(event) {
  event.preventDefault();
  const key = $("lookup-key").value;
  const out = $("lookup-result");
  out.textContent = "";
  try {
    await api("GET", messagePath(state.queue, key));
  } catch (error) {
    if (error.status !== 404) throw error;
    try {  // gone, but its timeline may be kept
      await api("GET", messagePath(state.queue, key) + "/history");
    } catch (again) {
      if (again.status !== 404) throw again;
      out.textContent = `no message ${key}`;
      return null;
    }
  }
  return go(state.queue, key);
}

async function browse(next) {
  const latest = reading("messages");
  if (!next) state.browseAfter = null;
  const params = new URLSearchParams({state: $("browse-state").value, limit: PAGE});
  const prefix = $("browse-prefix").value;
  if (prefix) params.set("prefix", prefix);
  if (state.browseAfter) params.set("after", state.browseAfter);
  const page = await api("GET", q(state.queue) + "/messages?" + params);
  if (!latest()) return;
  const body = $("messages").tBodies[0];
  body.replaceChildren();
  for (const m of page.messages) {
    const row = document.createElement("tr");
    row.dataset.key = m.key;
    cell(row, "", "key").appendChild(link(m.key, state.queue, m.key));
    timeCell(row, m.due_at);
    cell(row, m.priority, "priority");
    cell(row, m.group, "group");
    cell(row, m.attempt, "attempt");
    cell(row, m.claimed_by, "holder");
    timeCell(row, m.locked_until);
    cell(row, m.unreadable ? `(unreadable: ${m.unreadable})` : showJson(m.payload), "payload");
    body.appendChild(row);
  }
  state.browseAfter = page.next_after;
  $("browse-next").hidden = !page.next_after;
}

async function refreshDeadLetters() {
  const latest = reading("dead-letters");
  const params = new URLSearchParams({limit: PAGE, offset: state.deadOffset});
  const page = await api("GET", q(state.queue) + "/dead-letters?" + params);
  if (!latest()) return null;
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
    cell(row, "", "key").appendChild(link(d.key, state.queue, d.key));
    cell(row, d.attempts, "attempts");
    cell(row, d.priority, "priority");
    cell(row, d.group, "group");
    timeCell(row, d.failed_at);
    cell(row, "", "error").appendChild(folded(d.last_error));
    cell(row, "payload" in d ? showJson(d.payload) : "(bytes)", "payload");
    const actions = cell(row, "", "writer");
    actions.appendChild(button("Requeue", guarded(() => onLetters("requeue", [d.id]))));
    actions.appendChild(button("Drop", guarded(() => onLetters("drop", [d.id]))));
    body.appendChild(row);
  }
  $("select-all").checked = false;
  const last = Math.min(state.deadOffset + PAGE, page.total);
  $("dead-page").textContent = page.total ?
    `${state.deadOffset + 1}–${last} of ${page.total}` : "none";
  $("dead-prev").hidden = state.deadOffset === 0;
  $("dead-next").hidden = last >= page.total;
  return null;
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

// ---- one message: its fields and its timeline ------------------------------------------------

// a read whose 404 with one of these codes is an answer, not a problem: the error is returned
async function allowing(read, ...codes) {
  try {
    return await read;
  } catch (error) {
    if (error.status === 404 && codes.includes(error.code)) return error;
    throw error;
  }
}

function field(body, name, label, value, node) {
  const row = document.createElement("tr");
  row.dataset.field = name;
  const th = document.createElement("th");
  th.textContent = label;
  row.appendChild(th);
  const td = cell(row, value === null || value === undefined || value === "" ? "—" : value);
  if (node) td.replaceChildren(node);
  body.appendChild(row);
  return td;
}

function timeField(body, name, label, iso) {
  const td = field(body, name, label, when(iso));
  if (iso) td.title = iso;
}

// what the message page shows (its reads, as text): redrawn only when they change, so a
// traceback unfolded stays unfolded
let shownMessage = null;

async function showMessage() {
  const {queue, key} = state;
  shownMessage = null;
  $("crumb-queue").textContent = queue;
  $("crumb-queue").href = fragment(queue);
  $("crumb-key").textContent = key;
  $("message-key").textContent = key;
  return refreshMessage();
}

async function refreshMessage() {
  const {queue, key} = state;
  const path = messagePath(queue, key);
  const [found, history] = await Promise.all([
    allowing(api("GET", path), "not_found"),
    allowing(api("GET", path + "/history"), "not_found", "no_history")]);
  if (state.view !== "message" || state.queue !== queue || state.key !== key) return;
  const shown = JSON.stringify([queue, key, ...[found, history].map(
    (read) => (read instanceof Error ? [read.code, read.message] : read))]);
  if (shown === shownMessage) return;
  shownMessage = shown;
  const unfolded = new Set([...$("message").querySelectorAll("details[open]")]
    .map((details) => details.dataset.fold));
  const m = found instanceof Error ? null : found;
  const stateBadge = $("message-state");
  stateBadge.textContent = m ? m.state.replace("_", " ") : "gone";
  stateBadge.className = "badge state-" + (m ? m.state : "gone");
  const absent = $("message-absent");
  absent.hidden = Boolean(m);
  absent.textContent = history instanceof Error && history.code === "not_found" ?
    `No message ${key} in queue ${queue}, and no event of it in the history.` :
    `No message ${key} in queue ${queue} now: it was acked or dropped (see its timeline).`;
  const body = $("message-fields").tBodies[0];
  body.replaceChildren();
  $("message-payload-box").hidden = !m;
  if (m) {
    fields(body, m);
    $("message-payload").textContent = m.unreadable ? `(unreadable: ${m.unreadable})` :
      "payload" in m ? JSON.stringify(m.payload, null, 2) : `(bytes) ${m.payload_base64}`;
  }
  timeline(history);
  for (const details of $("message").querySelectorAll("details")) {
    details.open = unfolded.has(details.dataset.fold);
  }
}

function fields(body, m) {
  field(body, "state", "state", m.state.replace("_", " "));
  if (m.state === "dead_lettered") {
    field(body, "id", "dead letter", `#${m.id}`);
    field(body, "attempts", "attempts", m.attempts);
    timeField(body, "failed_at", "failed", m.failed_at);
    field(body, "last_error", "last error", "", folded(m.last_error, "last_error"));
  } else {
    field(body, "attempt", "attempt", m.attempt);
  }
  if (m.state === "dead_lettered") {
    timeField(body, "due_at", "scheduled for", m.due_at);
  } else {
    timeField(body, "due_at", m.state === "in_flight" ? "due again (lock expiry)" : "due",
              m.due_at);
    timeField(body, "scheduled_at", "scheduled for", m.scheduled_at);
  }
  timeField(body, "created_at", "created", m.created_at);
  field(body, "priority", "priority", m.priority);
  field(body, "group", "group", m.group);
  if (m.state !== "dead_lettered") {
    field(body, "claimed_by", "lock holder", m.claimed_by);
    timeField(body, "locked_until", "locked until", m.locked_until);
  }
  field(body, "enqueued_by", "enqueued by", m.enqueued_by);
  field(body, "trace_context", "trace context",
        m.state === "dead_lettered" ? "(not kept with dead letters)" : m.trace_context);
}

function timeline(history) {
  const body = $("timeline").tBodies[0];
  body.replaceChildren();
  const note = $("timeline-note");
  note.hidden = true;
  if (history instanceof Error) {
    note.hidden = false;
    note.textContent = history.code === "no_history" ? history.message :
      "No event of this key in the history.";
    return;
  }
  history.events.forEach((e, i) => {
    const row = document.createElement("tr");
    row.dataset.event = e.event;
    timeCell(row, e.at, PRECISE);
    cell(row, "", "event").appendChild(badge(e.event.replace("_", " "), "event-" + e.event));
    cell(row, e.actor, "actor");
    cell(row, e.attempt, "attempt");
    const detail = cell(row, "", "detail");
    detail.appendChild(folded(localTimes(e.detail), `event-${i}`));
    if (e.detail) detail.title = e.detail;
    body.appendChild(row);
  });
  if (!history.events.length) {
    note.hidden = false;
    note.textContent = "No event recorded: the history keeps the events of queues made " +
      "with history= (its producers and workers).";
  }
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
  if (state.view !== "queue") return;
  const latest = reading("chart");
  const data = await api("GET", "throughput");
  if (!latest()) return;
  const points = data.queues[state.queue + "|json"] || [];
  const drawn = drawChart($("chart"), points, data.since, data.minute);
  const current = points.find(([m]) => m === data.minute) || [data.minute, 0, 0];
  const sofar = data.minute === null ? "" :
    ` This minute so far: ${current[1]} offered, ${current[2]} acked.`;
  let text;
  if (data.problem) text = data.problem;
  else if (data.since === null) text = "Not sampled yet.";
  else if (drawn) {
    text = "Offered (blue) and acked (green) per whole minute, counted from the event " +
      `history every ${data.every_seconds} s since the service started (at most the last ` +
      "hour).";
  } else {
    text = `Counting whole minutes from ${CLOCK.format(new Date(data.since))}: the chart ` +
      "is drawn from the second one on.";
  }
  $("chart-note").textContent = text + sofar;
}

function drawChart(box, points, since, minute) {
  // whole minutes only, from the first the service counted whole to the last before the
  // current one (still being counted), at most an hour: neither a part of a minute nor a
  // single minute is drawn as a slope
  const byMinute = new Map(points.map(([m, offered, acked]) => [m, [offered, acked]]));
  box.dataset.offered = points.reduce((n, p) => n + p[1], 0);
  box.dataset.acked = points.reduce((n, p) => n + p[2], 0);
  const minutes = [];
  if (since !== null && minute !== null) {
    // the service keeps the current minute and the 59 before it
    for (let m = Math.max(since, minute - 59 * MINUTE); m < minute; m += MINUTE) minutes.push(m);
  }
  box.dataset.minutes = minutes.length;
  if (minutes.length < 2) {
    box.replaceChildren();
    return false;
  }
  const W = 600, H = 160, L = 40, B = 20;
  const series = minutes.map((m) => byMinute.get(m) || [0, 0]);
  const top = Math.max(1, ...series.flat());
  const root = svg("svg", {viewBox: `0 0 ${W} ${H}`, width: "100%", class: "chart"});
  const x = (i) => L + (i * (W - L - 5)) / (minutes.length - 1);
  const y = (v) => H - B - (v * (H - B - 10)) / top;
  svg("line", {x1: L, y1: y(0), x2: W - 5, y2: y(0), class: "axis"}, root);
  svg("line", {x1: L, y1: y(0), x2: L, y2: y(top), class: "axis"}, root);
  const label = (text, attrs) => { svg("text", attrs, root).textContent = text; };
  label(String(top), {x: L - 4, y: y(top) + 4, "text-anchor": "end"});
  label("0", {x: L - 4, y: y(0) + 4, "text-anchor": "end"});
  label(CLOCK.format(new Date(minutes[0])), {x: L, y: H - 4});
  label(CLOCK.format(new Date(minutes[minutes.length - 1])),
        {x: W - 5, y: H - 4, "text-anchor": "end"});
  [["offered", 0], ["acked", 1]].forEach(([name, index]) => {
    const d = series.map((v, i) => `${i ? "L" : "M"}${x(i).toFixed(1)},${y(v[index]).toFixed(1)}`);
    svg("path", {d: d.join(" "), class: "line " + name}, root);
  });
  box.replaceChildren(root);
  return true;
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
  if (state.view === "message") return refreshMessage();
  await refreshQueues();
  if (state.view === "queue" && !state.opening) {
    await Promise.all([refreshDetail(), refreshChart()]);
  }
  return null;
}

function on(id, event, fn) { $(id).addEventListener(event, guarded(fn)); }

document.addEventListener("DOMContentLoaded", () => {
  document.body.classList.toggle("read-only", !WRITER);
  for (const id of ["home", "crumb-home"]) {
    $(id).addEventListener("click", (event) => { event.preventDefault(); guarded(go)(); });
  }
  $("crumb-queue").addEventListener("click", (event) => {
    event.preventDefault();
    guarded(() => go(state.queue))();
  });
  on("pause", "click", () => control("POST", "/pause"));
  on("resume", "click", () => control("POST", "/resume"));
  on("rate-form", "submit", setRateLimit);
  on("concurrency-form", "submit", setConcurrencyLimit);
  on("rate-lift", "click", () => control("DELETE", "/rate-limit"));
  on("concurrency-lift", "click", () => control("DELETE", "/concurrency-limit"));
  on("lookup", "submit", lookup);
  on("browse", "submit", (event) => {
    event.preventDefault();
    return browse(false);
  });
  on("browse-next", "click", () => browse(true));
  on("requeue-selected", "click", () => onLetters("requeue", selectedLetters()));
  on("drop-selected", "click", () => onLetters("drop", selectedLetters()));
  $("select-all").addEventListener("change", (event) => {
    for (const box of $("dead-letters").tBodies[0].querySelectorAll("input")) {
      box.checked = event.target.checked;
    }
  });
  on("dead-prev", "click", () => {
    state.deadOffset = Math.max(0, state.deadOffset - PAGE);
    return refreshDeadLetters();
  });
  on("dead-next", "click", () => {
    state.deadOffset += PAGE;
    return refreshDeadLetters();
  });
  on("queues-next", "click", () => {
    state.queuesBefore.push(state.queuesAfter);
    state.queuesAfter = state.queuesNext;
    return refreshQueues();
  });
  on("queues-prev", "click", () => {
    state.queuesAfter = state.queuesBefore.pop() || null;
    return refreshQueues();
  });
  on("queues-filter", "submit", (event) => {
    event.preventDefault();
    state.queuesPrefix = $("queues-prefix").value;
    state.queuesAfter = null;
    state.queuesBefore = [];
    return refreshQueues();
  });
  window.addEventListener("hashchange", guarded(route));
  // the first view is the address's; then the next refresh starts REFRESH_MS after the last
  // one ended: never two at once
  const refresh = guarded(tick);
  (async function poll() {
    await guarded(route)();
    setTimeout(async function again() {
      await refresh();
      setTimeout(again, REFRESH_MS);
    }, REFRESH_MS);
  })();
});
