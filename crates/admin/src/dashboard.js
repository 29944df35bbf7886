"use strict";
// When the API needs its token, the page asks for it and keeps it in this tab's
// sessionStorage (per origin, gone with the tab); every request sends it as an
// Authorization header. A token in the page's URL is never read: URLs end up in logs.
const KEY = "sluice-admin-token";
let token = sessionStorage.getItem(KEY);
const last = new Map(); // server -> [queries, time]
const rate = new Map(); // server -> queries/s
let timer = null;

class NeedsToken extends Error {}

async function get(path) {
  const headers = token ? { Authorization: "Bearer " + token } : {};
  const r = await fetch(path, { headers, cache: "no-store" });
  if (r.status === 401) throw new NeedsToken(path);
  if (!r.ok) throw new Error(path + ": HTTP " + r.status);
  return r.json();
}

function setToken(t) {
  token = t;
  if (t) sessionStorage.setItem(KEY, t); else sessionStorage.removeItem(KEY);
  if (t) document.body.dataset.token = "1"; else delete document.body.dataset.token;
}

// The API refused: ask for the token (again, if the one given was wrong).
function askForToken() {
  const wrong = token != null;
  setToken(null);
  clearInterval(timer);
  timer = null;
  delete document.body.dataset.loaded;
  document.body.dataset.auth = wrong ? "wrong" : "needed";
  document.getElementById("login-error").textContent = wrong ? "wrong token" : "";
  document.getElementById("status").textContent = "the admin API needs its token";
  document.getElementById("token").focus();
}

document.getElementById("login").addEventListener("submit", ev => {
  ev.preventDefault();
  const input = document.getElementById("token");
  setToken(input.value);
  input.value = "";
  delete document.body.dataset.auth;
  start();
});

document.getElementById("logout").addEventListener("click", () => {
  setToken(null);
  location.reload();
});

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

function rows(table, list, cells, empty) {
  const body = document.querySelector("#" + table + " tbody");
  body.replaceChildren();
  if (!list.length) {
    body.append(el("tr", {}, el("td", { class: "empty", colspan: "7" }, empty)));
    return;
  }
  for (const item of list) {
    body.append(el("tr", {}, ...cells(item).map(([v, cls]) => el("td", cls ? { class: cls } : {}, v))));
  }
}

function fmt(n, digits) { return n == null ? "–" : Number(n).toFixed(digits); }

function renderServers(servers) {
  const now = performance.now();
  let total = 0;
  const box = document.getElementById("servers");
  box.replaceChildren();
  const order = { primary: 0, replica: 1, fenced: 2, unknown: 3 };
  servers.sort((a, b) => (order[a.role] - order[b.role]) || a.address.localeCompare(b.address));
  for (const s of servers) {
    const prev = last.get(s.address);
    if (prev && now > prev[1]) rate.set(s.address, (s.queries - prev[0]) * 1000 / (now - prev[1]));
    last.set(s.address, [s.queries, now]);
    const qps = rate.get(s.address) || 0;
    total += qps;
    const state = s.state.split(" ")[0];
    const pool = s.pool_in_use + s.pool_idle;
    box.append(el("div", { class: "server", "data-address": s.address, "data-role": s.role },
      el("div", {}, el("span", { class: "addr" }, s.address),
         el("span", { class: "badge role-" + s.role }, s.role),
         el("span", { class: "badge proto" }, s.protocol),
         s.discovered ? el("span", { class: "badge discovered", title: "found by " + s.discovered }, "discovered") : ""),
      el("div", { class: "state " + state }, s.state),
      el("div", { class: "grid2" },
        el("span", {}, "hostgroup"), el("span", {}, s.hostgroup),
        el("span", {}, "queries/s"), el("span", {}, fmt(qps, 0)),
        el("span", {}, "lag"), el("span", {}, lagText(s)),
        el("span", {}, "latency"), el("span", {}, s.latency_us == null ? "–" : fmt(s.latency_us / 1000, 2) + " ms"),
        el("span", {}, "pool"), el("span", {}, s.pool_in_use + " in use / " + pool + " open"),
        el("span", {}, "source"), el("span", {}, s.replicates_from || "–"),
        el("span", {}, "position"), el("span", {}, (s.gtid_position || "–") + (s.timeline == null ? "" : " (timeline " + s.timeline + ")"))),
      el("div", { class: "bar", title: "connections in use" },
        el("div", { style: "width:" + (pool ? Math.round(100 * s.pool_in_use / pool) : 0) + "%" }))));
  }
  document.getElementById("qps").textContent = fmt(total, 0);
}

/** Replication lag: time, and WAL bytes for PostgreSQL standbys. */
function lagText(s) {
  const parts = [];
  if (s.lag_seconds != null) parts.push(s.lag_seconds + " s");
  if (s.lag_bytes != null) parts.push(fmt(s.lag_bytes, 0) + " B");
  return parts.length ? parts.join(", ") : "–";
}

async function refresh() {
  try {
    const [servers, hostgroups, sessions, digests] = await Promise.all([
      get("/api/servers"), get("/api/hostgroups"), get("/api/sessions"),
      get("/api/digests?limit=10&sort=time"),
    ]);
    renderServers(servers);
    rows("hostgroups", hostgroups, h => [[h.name], [h.servers.join(", ")], [h.pool_in_use, "num"],
      [h.pool_idle, "num"], [h.waiting, "num"], [h.statements, "num"], [fmt(h.latency_avg_ms, 2), "num"]],
      "no hostgroups");
    const active = sessions.filter(s => s.statement || s.pinned);
    document.getElementById("clients").textContent = sessions.length;
    document.getElementById("pinned").textContent = sessions.filter(s => s.pinned).length;
    rows("sessions", active.slice(0, 20), s => [[s.id], [s.user], [s.client],
      [s.pinned_by.join(", ") || "–"], [s.backend || "–"], [s.statement || "–", "sql"],
      [s.statement_ms == null ? "–" : s.statement_ms, "num"]], "no active sessions");
    rows("digests", digests.digests, d => [[d.text, "sql"], [d.hostgroup], [d.count, "num"],
      [fmt(d.avg_ms, 2), "num"], [fmt(d.p99_ms, 2), "num"], [d.rows_sent, "num"], [d.errors, "num"]],
      "no statements yet");
    document.getElementById("status").textContent = "updated " + new Date().toLocaleTimeString();
    document.body.dataset.loaded = "1";
  } catch (e) {
    if (e instanceof NeedsToken) askForToken();
    else document.getElementById("status").textContent = "error: " + e.message;
  }
}

function start() {
  if (token) document.body.dataset.token = "1";
  refresh();
  if (timer == null) timer = setInterval(refresh, 2000);
}
start();
