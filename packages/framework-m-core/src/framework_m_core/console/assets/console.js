// framework-m console: one page over the JSON API. Everything from the broker is put
// on the page as text (textContent), never as markup.
"use strict";

const state = {
  tab: "overview",
  csrf: null,
  role: null,
  changesAllowed: false,
  pages: { schedules: 0, "dead-letters": 0, jobs: 0 },
  jobState: "running", // the list the jobs tab shows
  limit: 50,
  totals: {},
  job: null,
  history: null, // the schedule whose history is open: it stays open across refreshes
  selected: new Set(), // dead-letter keys checked: they stay checked across refreshes
};
const $ = (sel, root = document) => root.querySelector(sel);

function say(text, isError = false) {
  const box = $("#message");
  box.textContent = text;
  box.className = isError ? "error" : "";
  box.hidden = !text;
}

async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (method !== "GET" && state.csrf) headers["X-CSRF-Token"] = state.csrf;
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "same-origin",
  });
  const data = await response.json().catch(() => ({ error: response.statusText }));
  if (!response.ok) throw new Error(data.error || `${response.status}`);
  return data;
}

function cell(row, text, cls) {
  const td = document.createElement("td");
  td.textContent = text === null || text === undefined ? "-" : String(text);
  if (cls) td.className = cls;
  row.appendChild(td);
  return td;
}

function button(label, onClick, cls = "change") {
  const b = document.createElement("button");
  b.type = "button";
  b.textContent = label;
  b.className = cls;
  b.addEventListener("click", onClick);
  return b;
}

function when(unix) {
  if (unix === null || unix === undefined) return "-";
  return new Date(unix * 1000).toISOString().replace(".000Z", "Z");
}

function ago(seconds) {
  return seconds < 90 ? `${Math.round(seconds)} s ago` : `${Math.round(seconds / 60)} min ago`;
}

function pager(section, total) {
  const offset = state.pages[section] * state.limit;
  const end = Math.min(offset + state.limit, total);
  $(`#${section} .shown`).textContent = total ? `${offset + 1}-${end} of ${total}` : "none";
  state.totals[section] = total;
}

function query(section) {
  const q = encodeURIComponent($(`#${section}-q`).value.trim());
  const offset = state.pages[section] * state.limit;
  return `?q=${q}&offset=${offset}&limit=${state.limit}`;
}

// -- schedules -------------------------------------------------------------------------

async function loadSchedules() {
  const data = await api("GET", `/api/schedules${query("schedules")}`);
  pager("schedules", data.total);
  const body = $("#schedules tbody");
  body.replaceChildren();
  for (const s of data.items) {
    const row = document.createElement("tr");
    row.dataset.name = s.name;
    const name = cell(row, "", "name");
    name.appendChild(button(s.name, () => { state.history = s.name; refresh(); }, "link"));
    cell(row, s.schedule);
    cell(row, when(s.next_slot), "num");
    const lastRun = s.last_run && s.last_run.slot !== null ? s.last_run.slot : null;
    cell(row, when(Math.max(s.last_slot || 0, lastRun || 0) || null), "num");
    const paused = s.paused === true;
    const stateText = paused
      ? `paused${s.paused_until ? ` until ${when(s.paused_until)}` : ""}${s.reason ? ` (${s.reason})` : ""}${s.paused_by ? ` by ${s.paused_by}` : ""}`
      : s.paused === false ? "active" : "-";
    cell(row, stateText, paused ? "paused state" : "active-state state");
    cell(row, s.overlap);
    cell(row, s.running === null ? null : s.running.length ? s.running.join(", ") : "no");
    const last = s.last_run;
    cell(row, last ? outcome(last) : null, last ? `outcome ${last.outcome}` : "");
    const actions = document.createElement("td");
    actions.className = "change";
    actions.appendChild(
      paused
        ? button("Resume", () => change(`/api/schedules/${encodeURIComponent(s.name)}/resume`, {}, `${s.name} resumed`))
        : button("Pause", () => pause(s.name)),
    );
    actions.appendChild(document.createTextNode(" "));
    actions.appendChild(button("Trigger", () => change(`/api/schedules/${encodeURIComponent(s.name)}/trigger`, {}, `${s.name} triggered`)));
    if (s.source === "runtime") {
      actions.appendChild(document.createTextNode(" "));
      actions.appendChild(button("Delete", () => {
        if (confirm(`Delete the runtime schedule ${s.name}?`)) {
          change(`/api/runtime-schedules/${encodeURIComponent(s.name.slice(1))}`, undefined, `${s.name} deleted`, "DELETE");
        }
      }));
    }
    row.appendChild(actions);
    body.appendChild(row);
  }
}

// What an outcome means: a skip by overlap or a cancel is neutral, a failure bad.
const OUTCOMES = {
  succeeded: "succeeded",
  retried: "failed, retried",
  dead_lettered: "failed, dead-lettered",
  skipped: "skipped: previous run still going",
  expired: "missed: stored past its grace",
  cancelled: "cancelled",
};

function outcome(run) {
  return OUTCOMES[run.outcome] || run.outcome;
}

function seconds(value) {
  return value === null || value === undefined ? null : `${value.toFixed(3)} s`;
}

async function loadHistory() {
  const box = $("#history");
  box.hidden = !state.history;
  if (!state.history) return;
  const data = await api("GET", `/api/schedules/${encodeURIComponent(state.history)}/history`);
  $("#history h2").textContent = `Last runs of ${data.name}`;
  const body = $("#history tbody");
  body.replaceChildren();
  for (const run of data.items) {
    const row = document.createElement("tr");
    cell(row, run.slot === null ? "triggered" : when(run.slot), "num");
    cell(row, outcome(run), `outcome ${run.outcome}`);
    cell(row, run.replica);
    cell(row, run.attempt, "num");
    cell(row, when(run.started_at), "num");
    cell(row, seconds(run.duration), "num");
    cell(row, run.error);
    cell(row, run.job_id);
    body.appendChild(row);
  }
  $("#history .none").hidden = data.items.length > 0;
}

function pause(name) {
  const reason = prompt(`Pause ${name}: why? (optional)`, "");
  if (reason === null) return;
  change(`/api/schedules/${encodeURIComponent(name)}/pause`, { reason: reason || null }, `${name} paused`);
}

async function change(path, body, done, method = "POST") {
  try {
    const answer = await api(method, path, body);
    say(answer.job_id ? `${done}: job ${answer.job_id}` : done);
    await refresh();
  } catch (error) {
    say(error.message, true);
  }
}

function runtimeForm(event) {
  event.preventDefault();
  const form = event.target;
  const value = (name) => form.elements[name].value.trim();
  let kwargs = {};
  try {
    kwargs = value("kwargs") ? JSON.parse(value("kwargs")) : {};
  } catch (error) {
    say(`kwargs: ${error.message}`, true);
    return;
  }
  const body = { id: value("id"), job: value("job"), kwargs };
  if (value("cron")) body.cron = value("cron");
  if (value("tz")) body.tz = value("tz");
  if (value("every")) body.every = Number(value("every"));
  change("/api/runtime-schedules", body, `@${body.id} set`);
}

// -- replicas and queues ---------------------------------------------------------------

async function loadReplicas() {
  const data = await api("GET", "/api/replicas");
  const body = $("#replicas tbody");
  body.replaceChildren();
  for (const r of data.items) {
    const row = document.createElement("tr");
    cell(row, r.host);
    cell(row, r.pid, "num");
    cell(row, r.version);
    cell(row, r.ticking ? "ticks and runs jobs" : "runs jobs");
    cell(row, `${r.running} of ${r.concurrency}`, "num");
    cell(row, when(r.started_at), "num");
    cell(row, ago(r.age), "num");
    body.appendChild(row);
  }
  $("#replicas .note").textContent = data.note
    || `${data.items.length} replica(s) heard from within ${data.quiet_after} s`;
}

async function loadQueues() {
  const data = await api("GET", "/api/queues");
  $("#queues .queue-name").textContent = data.queue;
  const counts = $("#queues .counts");
  counts.replaceChildren();
  for (const [name, value] of Object.entries(data.counts || {})) {
    const dt = document.createElement("dt");
    dt.textContent = name.replace("_", " ");
    const dd = document.createElement("dd");
    dd.textContent = value === null ? "-" : String(value);
    counts.append(dt, dd);
  }
  chart($("#queue-chart"), data.samples, [
    ["ready", "ready", (s) => s.ready ?? null],
    ["reserved", "reserved", (s) => s.reserved ?? null],
    ["dead", "dead", (s) => s.dead_letters ?? null],
  ], "jobs");
}

const SVG = "http://www.w3.org/2000/svg";

function svgEl(parent, name, attrs, text) {
  const el = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  if (text !== undefined) el.textContent = text;
  parent.appendChild(el);
  return el;
}

function clock(unix) {
  return new Date(unix * 1000).toISOString().slice(11, 19);
}

// A line chart over time with labelled axes: series are [class, label, value(sample, i)],
// a value null where it is not known.
function chart(svg, samples, series, unit) {
  svg.replaceChildren();
  const W = 640, H = 240, L = 56, R = 12, T = 12, B = 30;
  if (samples.length < 2) {
    svgEl(svg, "text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "axis" }, "waiting for samples");
    return;
  }
  const t0 = samples[0].at, t1 = samples[samples.length - 1].at;
  const values = series.map(([, , value]) => samples.map((s, i) => value(s, i)));
  const top = Math.max(1, ...values.flat().filter((v) => v !== null));
  const x = (t) => L + ((W - L - R) * (t - t0)) / Math.max(1, t1 - t0);
  const y = (v) => H - B - ((H - B - T) * v) / top;
  svgEl(svg, "line", { x1: L, y1: H - B, x2: W - R, y2: H - B, class: "axis-line" });
  svgEl(svg, "line", { x1: L, y1: T, x2: L, y2: H - B, class: "axis-line" });
  for (const v of [0, top / 2, top]) {
    const label = Number.isInteger(v) ? String(v) : v.toFixed(1);
    svgEl(svg, "text", { x: L - 6, y: y(v) + 4, "text-anchor": "end", class: "axis" }, label);
  }
  svgEl(svg, "text", { x: 4, y: H - 10, class: "axis unit" }, unit);
  for (const [t, anchor] of [[t0, "start"], [(t0 + t1) / 2, "middle"], [t1, "end"]]) {
    svgEl(svg, "text", { x: x(t), y: H - 10, "text-anchor": anchor, class: "axis" }, clock(t));
  }
  series.forEach(([cls], n) => {
    const points = samples
      .map((s, i) => [s.at, values[n][i]])
      .filter(([, v]) => v !== null)
      .map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`);
    svgEl(svg, "polyline", { class: cls, points: points.join(" ") });
  });
}

// Replicas renew their counts in the roll every 10 s: a rate is taken over at least
// RATE_WINDOW seconds, so that it does not read 0 between two renewals and a spike at each.
const RATE_WINDOW = 20;

function rate(samples, key) {
  return (s, i) => {
    let j = i - 1;
    while (j > 0 && samples[j].at > s.at - RATE_WINDOW) j -= 1;
    if (j < 0 || s[key] === undefined || samples[j][key] === undefined) return null;
    return Math.max(0, s[key] - samples[j][key]) / Math.max(0.001, s.at - samples[j].at);
  };
}

// -- overview --------------------------------------------------------------------------

function tile(list, name, value) {
  const dt = document.createElement("dt");
  dt.textContent = name;
  const dd = document.createElement("dd");
  dd.textContent = value === null || value === undefined ? "-" : String(value);
  list.append(dt, dd);
}

async function loadOverview() {
  const [queues, fleet] = await Promise.all([api("GET", "/api/queues"), api("GET", "/api/replicas")]);
  const samples = queues.samples;
  const sum = (key) => fleet.items.reduce((n, r) => n + Object.entries(r.counts || {})
    .filter(([k]) => key === "all" || key.includes(k)).reduce((m, [, v]) => m + v, 0), 0);
  const tiles = $("#overview .tiles");
  tiles.replaceChildren();
  const settled = rate(samples, "processed");
  const last = samples.length > 1 ? settled(samples[samples.length - 1], samples.length - 1) : null;
  tile(tiles, "settled by the live replicas", sum("all"));
  tile(tiles, "failed attempts", sum(["retried", "dead_lettered"]));
  tile(tiles, "settled a second now", last === null ? null : last.toFixed(1));
  for (const key of ["ready", "delayed", "retries", "reserved", "dead_letters"]) {
    if (queues.counts && queues.counts[key] !== undefined) tile(tiles, key.replace("_", " "), queues.counts[key]);
  }
  const oldest = queues.oldest_waiting;
  if (queues.waiting_listed) tile(tiles, "oldest waiting", oldest ? `${oldest.age === null ? "?" : oldest.age.toFixed(1)} s (${oldest.job})` : "none");
  const outbox = queues.outbox;
  if (outbox) {
    tile(tiles, "outbox rows waiting", outbox.rows ? `${outbox.rows} (oldest ${outbox.oldest.toFixed(1)} s)` : "none");
    if (outbox.failing) tile(tiles, "outbox rows failing", outbox.failing);
  }
  chart($("#throughput"), samples, [["reserved", "settled", settled], ["dead", "failed", rate(samples, "failed")]], "jobs/s");
  const body = $("#overview-replicas tbody");
  body.replaceChildren();
  for (const r of fleet.items) {
    const row = document.createElement("tr");
    cell(row, `${r.host}:${r.pid}`);
    cell(row, r.ticking ? "ticks and runs jobs" : "runs jobs");
    const listed = Object.values(r.jobs || {}).reduce((n, v) => n + v, 0);
    cell(row, `${r.jobs ? listed : r.running} of ${r.concurrency}`, "num");
    const jobs = Object.entries(r.jobs || {}).map(([name, n]) => `${name} x${n}`).join(", ");
    cell(row, jobs || "nothing");
    const counts = r.counts || {};
    cell(row, Object.values(counts).reduce((n, v) => n + v, 0), "num");
    cell(row, (counts.retried || 0) + (counts.dead_lettered || 0), "num");
    body.appendChild(row);
  }
}

// -- dead letters ----------------------------------------------------------------------

async function loadDeadLetters() {
  const data = await api("GET", `/api/dead-letters${query("dead-letters")}`);
  pager("dead-letters", data.total);
  const body = $("#dead-letters tbody");
  body.replaceChildren();
  for (const d of data.items) {
    const row = document.createElement("tr");
    row.dataset.key = d.key;
    const pick = document.createElement("td");
    const box = document.createElement("input");
    box.type = "checkbox";
    box.value = d.key;
    box.checked = state.selected.has(d.key);
    box.addEventListener("change", () => {
      if (box.checked) state.selected.add(d.key);
      else state.selected.delete(d.key);
    });
    box.setAttribute("aria-label", `Select ${d.job_id}`);
    pick.appendChild(box);
    row.appendChild(pick);
    cell(row, when(d.dead_lettered_at), "num");
    cell(row, d.job);
    cell(row, d.job_id);
    cell(row, d.attempts, "num");
    cell(row, d.reason.split("\n")[0]);
    const shown = document.createElement("td");
    const details = document.createElement("details");
    const summary = document.createElement("summary");
    summary.textContent = `${d.size} bytes`;
    const pre = document.createElement("pre");
    pre.textContent = d.body + (d.body_cut ? "\n..." : "");
    details.append(summary, pre);
    shown.appendChild(details);
    row.appendChild(shown);
    body.appendChild(row);
  }
}

function settleLetters(action) {
  const keys = [...state.selected];
  if (!keys.length) {
    say("Select dead letters first", true);
    return;
  }
  const verb = action === "requeue" ? "Requeue" : "Purge";
  if (!confirm(`${verb} ${keys.length} dead letter(s)?`)) return;
  state.selected.clear();
  $("#all-letters").checked = false;
  change(`/api/dead-letters/${action}`, { keys }, `${action === "requeue" ? "Requeued" : "Purged"} ${keys.length} dead letter(s)`);
}

async function settleJob(action) {
  const job = $("#dead-job").value.trim();
  if (!job) {
    say("Name the job whose dead letters to settle", true);
    return;
  }
  const verb = action === "requeue" ? "Requeue" : "Purge";
  try {
    const found = await api("GET", `/api/jobs?state=dead&job=${encodeURIComponent(job)}&limit=1`);
    if (!found.total) {
      say(`No dead letter of ${job}`, true);
      return;
    }
    if (!confirm(`${verb} all ${found.total} dead letter(s) of ${job}?`)) return;
    const answer = await api("POST", `/api/dead-letters/${action}`, { job });
    say(`${action === "requeue" ? "Requeued" : "Purged"} ${answer.count} dead letter(s) of ${job}`);
    await refresh();
  } catch (error) {
    say(error.message, true);
  }
}

// -- jobs ------------------------------------------------------------------------------

async function cancelWaiting() {
  const job = $("#waiting-job").value.trim();
  if (!job) {
    say("Name the job whose waiting jobs to cancel", true);
    return;
  }
  try {
    let held = 0;
    for (const kind of ["waiting", "delayed", "retrying"]) {
      held += (await api("GET", `/api/jobs?state=${kind}&job=${encodeURIComponent(job)}&limit=1`)).total;
    }
    if (!held) {
      say(`No job of ${job} is waiting`, true);
      return;
    }
    if (!confirm(`Cancel all ${held} waiting, delayed and retrying job(s) of ${job}?`)) return;
    const answer = await api("POST", "/api/jobs/cancel-waiting", { job });
    say(`Cancelled ${answer.count} waiting job(s) of ${job}`);
    await refresh();
  } catch (error) {
    say(error.message, true);
  }
}

// What each list shows: its columns, and how a job's row fills them.
const JOB_LISTS = {
  waiting: [
    ["Job", (j) => j.job], ["Id", null], ["Attempt", (j) => j.attempt],
    ["Enqueued", (j) => when(j.enqueued_at)],
  ],
  delayed: [
    ["Due", (j) => when(j.due_at)], ["Job", (j) => j.job], ["Id", null],
    ["Enqueued", (j) => when(j.enqueued_at)],
  ],
  retrying: [
    ["Next attempt", (j) => when(j.due_at)], ["Job", (j) => j.job], ["Id", null],
    ["Attempt", (j) => j.attempt], ["Enqueued", (j) => when(j.enqueued_at)],
  ],
  running: [
    ["Job", (j) => j.job], ["Id", null], ["Attempt", (j) => j.attempt],
    ["Started", (j) => when(j.started_at)], ["Running for", (j) => seconds(j.running_for)],
    ["Replica", (j) => j.replica],
  ],
  finished: [
    ["Finished", (j) => when(j.finished_at)], ["Job", (j) => j.job], ["Id", null],
    ["Outcome", (j) => outcome(j)], ["Attempt", (j) => j.attempt],
    ["Took", (j) => seconds(j.duration)], ["Replica", (j) => j.replica],
  ],
  failed: [
    ["Failed", (j) => when(j.finished_at)], ["Job", (j) => j.job], ["Id", null],
    ["Outcome", (j) => outcome(j)], ["Attempt", (j) => j.attempt],
    ["Replica", (j) => j.replica], ["Error", (j) => j.error],
  ],
  dead: [
    ["Dead since", (j) => when(j.dead_lettered_at)], ["Job", (j) => j.job], ["Id", null],
    ["Attempts", (j) => j.attempts], ["Reason", (j) => j.reason],
  ],
};

async function loadJobList() {
  const data = await api("GET", `/api/jobs${query("jobs")}&state=${state.jobState}`);
  pager("jobs", data.total);
  const columns = JOB_LISTS[state.jobState];
  const head = $("#job-list thead tr");
  head.replaceChildren();
  for (const [title] of columns) {
    const th = document.createElement("th");
    th.textContent = title;
    head.appendChild(th);
  }
  const body = $("#job-list tbody");
  body.replaceChildren();
  for (const j of data.items) {
    const row = document.createElement("tr");
    row.dataset.jobId = j.job_id;
    for (const [title, value] of columns) {
      if (value === null) {
        const td = cell(row, "", "job-id");
        td.appendChild(button(j.job_id, () => { state.job = j.job_id; $("#job-id").value = j.job_id; refresh(); }, "link"));
      } else {
        cell(row, value(j), title === "Outcome" ? `outcome ${j.outcome}` : "");
      }
    }
    body.appendChild(row);
  }
  for (const b of document.querySelectorAll("#jobs .states button")) b.classList.toggle("active", b.dataset.state === state.jobState);
}

async function loadJobs() {
  await loadJobList();
  await loadJob();
}

async function loadJob() {
  if (!state.job) return;
  const data = await api("GET", `/api/jobs/${encodeURIComponent(state.job)}`);
  const list = $("#jobs .job");
  list.replaceChildren();
  const rows = [
    ["job id", data.job_id], ["state", data.state], ["job", data.job_name],
    ["attempts", data.attempts], ["enqueued", when(data.enqueued_at)], ["due", when(data.due_at)],
    ["started", when(data.started_at)], ["finished", when(data.finished_at)],
    ["error", data.error], ["result", data.has_result ? JSON.stringify(data.result) : null],
  ];
  for (const [name, value] of rows) {
    const dt = document.createElement("dt");
    dt.textContent = name;
    const dd = document.createElement("dd");
    dd.textContent = value === null || value === undefined ? "-" : String(value);
    if (name === "state") dd.className = String(value);
    list.append(dt, dd);
  }
  $("#cancel-job").hidden = !["queued", "scheduled", "running"].includes(data.state);
  const trace = $("#job-traceback");
  trace.textContent = data.traceback || "";
  trace.hidden = !data.traceback;
  const runs = $("#job-runs tbody");
  runs.replaceChildren();
  for (const r of data.runs) {
    const row = document.createElement("tr");
    cell(row, r.attempt);
    cell(row, when(r.started_at));
    cell(row, when(r.finished_at));
    cell(row, seconds(r.duration));
    cell(row, outcome(r), `outcome ${r.outcome}`);
    cell(row, r.replica);
    cell(row, r.error);
    runs.appendChild(row);
  }
  $("#job-runs").hidden = !data.runs.length;
}

// -- session, tabs, refresh ------------------------------------------------------------

async function loadSession() {
  const s = await api("GET", "/api/session");
  state.csrf = s.csrf;
  state.role = s.role;
  state.changesAllowed = s.changes_allowed;
  const canSignIn = s.changes_allowed || s.reads_guarded;
  $("#sign-in").hidden = s.signed_in || !canSignIn;
  $("#signed-in").hidden = !s.signed_in;
  $("#role").textContent = s.signed_in ? `signed in (${s.role === "change" ? "may change" : "reads"})` : "";
  document.body.classList.toggle("read-only", s.role !== "change");
  if (!s.changes_allowed) say("Read only: this console was started without M_CONSOLE_TOKEN.");
  return s;
}

async function loadBroker() {
  const overview = await api("GET", "/api/overview");
  $("#broker").textContent = overview.broker;
}

async function loadSchedulesAndHistory() {
  await loadSchedules();
  await loadHistory();
}

const loaders = {
  overview: loadOverview,
  schedules: loadSchedulesAndHistory,
  replicas: loadReplicas,
  queues: loadQueues,
  "dead-letters": loadDeadLetters,
  jobs: loadJobs,
};

async function refresh() {
  try {
    await loaders[state.tab]();
  } catch (error) {
    say(error.message, true);
  }
  const main = $("main"); // how many times the page has been drawn: tests wait on it
  main.dataset.refreshes = String(Number(main.dataset.refreshes || 0) + 1);
}

function show(tab) {
  state.tab = tab;
  say(state.changesAllowed ? "" : "Read only: this console was started without M_CONSOLE_TOKEN.");
  for (const b of document.querySelectorAll("nav button")) b.classList.toggle("active", b.dataset.tab === tab);
  for (const s of document.querySelectorAll("main section")) s.hidden = s.id !== tab;
  refresh();
}

async function start() {
  for (const b of document.querySelectorAll("nav button")) b.addEventListener("click", () => show(b.dataset.tab));
  for (const section of ["schedules", "dead-letters", "jobs"]) {
    let typing;
    $(`#${section}-q`).addEventListener("input", () => {
      clearTimeout(typing);
      typing = setTimeout(() => { state.pages[section] = 0; refresh(); }, 250);
    });
    for (const b of document.querySelectorAll(`#${section} .pager button`)) {
      b.addEventListener("click", () => {
        const next = state.pages[section] + Number(b.dataset.page);
        if (next < 0 || next * state.limit >= (state.totals[section] || 0)) return;
        state.pages[section] = next;
        refresh();
      });
    }
  }
  $("#runtime-form").addEventListener("submit", runtimeForm);
  $("#close-history").addEventListener("click", () => { state.history = null; $("#history").hidden = true; });
  $("#requeue").addEventListener("click", () => settleLetters("requeue"));
  $("#purge").addEventListener("click", () => settleLetters("purge"));
  $("#requeue-job").addEventListener("click", () => settleJob("requeue"));
  $("#cancel-waiting").addEventListener("click", cancelWaiting);
  $("#purge-job").addEventListener("click", () => settleJob("purge"));
  $("#all-letters").addEventListener("change", (e) => {
    for (const box of document.querySelectorAll("#dead-letters tbody input")) {
      box.checked = e.target.checked;
      if (box.checked) state.selected.add(box.value);
      else state.selected.delete(box.value);
    }
  });
  for (const b of document.querySelectorAll("#jobs .states button")) {
    b.addEventListener("click", () => { state.jobState = b.dataset.state; state.pages.jobs = 0; refresh(); });
  }
  $("#job-form").addEventListener("submit", (e) => {
    e.preventDefault();
    state.job = $("#job-id").value.trim();
    refresh();
  });
  $("#cancel-job").addEventListener("click", () => change(`/api/jobs/${encodeURIComponent(state.job)}/cancel`, {}, "Cancel asked"));
  $("#sign-in").addEventListener("submit", async (e) => {
    e.preventDefault();
    try {
      await api("POST", "/api/session", { token: $("#token").value });
      $("#token").value = "";
      say("Signed in");
      await loadSession();
      await loadBroker();
      await refresh();
    } catch (error) {
      say(error.message, true);
    }
  });
  $("#sign-out").addEventListener("click", async () => {
    await api("DELETE", "/api/session").catch(() => {});
    await loadSession();
    say("Signed out");
  });
  try {
    const s = await loadSession();
    if (!s.reads_guarded || s.signed_in) {
      await loadBroker();
      await refresh();
    } else {
      say("Sign in to read this console.");
    }
  } catch (error) {
    say(error.message, true);
  }
  setInterval(() => { if (!document.hidden) refresh(); }, 5000);
}

document.addEventListener("DOMContentLoaded", start);
