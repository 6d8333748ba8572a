// The approvals dashboard: lists the queue through the API, follows /api/events, and
// approves or denies a request as it was shown (its hash goes with the decision).
// Every value from the server is placed with textContent, never parsed as markup; the
// request's fields arrive already escaped for display ("shown"). The token is kept in
// this tab's sessionStorage and sent as an Authorization header (never a cookie, never
// in a URL); on the WebSocket it is the first message.
"use strict";

const KEY = "agent-sandbox-token";
let token = sessionStorage.getItem(KEY) || "";
let socket = null;
let refreshTimer = null;
const $ = (id) => document.getElementById(id);

function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const c of children) if (c) node.append(c);
  return node;
}

function takeTokenFromFragment() {
  const params = new URLSearchParams(location.hash.slice(1));
  const given = params.get("token");
  if (given) {
    token = given;
    sessionStorage.setItem(KEY, token);
    params.delete("token");
    const rest = params.toString();
    history.replaceState(null, "", location.pathname + (rest ? "#" + rest : ""));
  }
}

async function api(path, options) {
  const opts = Object.assign({ headers: {} }, options || {});
  opts.headers = Object.assign({ Authorization: "Bearer " + token }, opts.headers);
  const res = await fetch(path, opts);
  if (res.status === 401) {
    showLogin("the token was refused");
    throw new Error("unauthorised");
  }
  const body = await res.json().catch(() => ({}));
  if (!res.ok) {
    const detail = typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail);
    throw new Error(res.status + ": " + detail);
  }
  return body;
}

function notice(text, bad) {
  const n = $("notice");
  n.textContent = text;
  n.className = bad ? "notice error" : "notice";
}

function age(created) {
  if (!created) return "?";
  const s = Math.max(0, Math.floor(Date.now() / 1000 - created));
  return s < 60 ? s + "s" : s < 3600 ? Math.floor(s / 60) + "m" : Math.floor(s / 3600) + "h";
}

function basename(path) {
  return String(path || "").split("/").filter(Boolean).pop() || "/";
}

function fieldsTable(req) {
  const table = el("table", { class: "fields" });
  for (const f of req.fields) {
    table.append(el("tr", {}, el("th", { text: f.name }), el("td", {}, el("pre", { text: f.shown }))));
  }
  return table;
}

function timelineButton(req, card) {
  return el("button", {
    text: "Timeline", class: "timeline-toggle", onclick: async () => {
      const old = card.querySelector(".timeline");
      if (old) { old.remove(); return; }
      const list = el("ol", { class: "timeline" });
      card.append(list);
      try {
        const trail = await api("/api/audit?request=" + encodeURIComponent(req.id));
        for (const e of trail.entries) {
          list.append(el("li", { text: [e.ts, e.event, e.verdict || "", e.by ? "by " + e.by : "",
            e.detail].filter(Boolean).join("  ") }));
        }
        if (!trail.entries.length) list.append(el("li", { text: "no audit records yet" }));
      } catch (err) {
        list.append(el("li", { class: "error", text: String(err.message) }));
      }
    },
  });
}

function card(req) {
  const risk = req.risk || "?";
  const node = el("div", { class: "card", id: "req-" + req.id, "data-id": req.id,
    "data-state": req.state });
  node.append(el("div", { class: "head" },
    el("span", { class: "risk risk-" + risk.replace(/[^a-z]/g, ""), text: risk }),
    el("strong", { text: (req.kind || "?") + " from " + (req.agent || "?") }),
    el("span", { text: "in " + basename(req.repo) }),
    el("span", { text: age(req.created) + " ago" }),
    el("span", { class: "id", text: req.id })));
  node.append(el("div", { class: "effect", text: req.effect }));
  node.append(fieldsTable(req));
  if (req.why) node.append(el("div", { class: "why", text: "why: " + req.why }));
  if (req.refused) node.append(el("div", { class: "warn", text: "WARNING: " + req.refused }));
  const actions = el("div", { class: "actions" });
  if (req.state === "pending") {
    const reason = el("input", { type: "text", placeholder: "reason (told to the agent)",
      class: "reason", maxlength: "2000" });
    const approve = el("button", { class: "approve", text: "Approve" });
    const deny = el("button", { class: "deny", text: "Deny" });
    const decide = async (verb) => {
      approve.disabled = deny.disabled = true;
      const body = { hash: req.hash };
      if (verb === "deny") body.reason = reason.value;
      try {
        await api("/api/requests/" + encodeURIComponent(req.id) + "/" + verb, {
          method: "POST", headers: { "Content-Type": "application/json" },
          body: JSON.stringify(body),
        });
        notice((verb === "approve" ? "approved " : "denied ") + req.id);
      } catch (err) {
        notice(String(err.message), true);
        approve.disabled = deny.disabled = false;
      }
      scheduleRefresh(0);
    };
    approve.addEventListener("click", () => decide("approve"));
    deny.addEventListener("click", () => decide("deny"));
    actions.append(approve, deny, reason);
  } else if (req.decision) {
    const done = { approve: "approved", deny: "denied", timeout: "timed out",
      cancel: "cancelled" }[req.decision.decision] || req.decision.decision;
    actions.append(el("span", { text: done + " by " + req.decision.by }));
  }
  if (req.result) {
    const r = req.result;
    actions.append(el("span", { class: "status status-" + r.status,
      text: r.status + (r.exit_code !== null && r.exit_code !== undefined ? " (exit " + r.exit_code + ")" : "") }));
  }
  actions.append(timelineButton(req, node));
  node.append(actions);
  if (req.result && (req.result.stdout_shown || req.result.stderr_shown || req.result.reason)) {
    node.append(el("pre", { class: "output", text: [req.result.stdout_shown,
      req.result.stderr_shown, req.result.reason || ""].filter(Boolean).join("\n") }));
  }
  return node;
}

function keyOf(req) {
  return [req.id, req.state, req.hash, req.decision ? req.decision.decision : "",
    req.result ? req.result.status : ""].join(" ");
}

function render(listId, countId, items, empty) {
  // a card whose request did not change stays the same node (its buttons, the reason
  // being typed and an open timeline are kept); a changed one is drawn anew
  const list = $(listId);
  const old = new Map([...list.querySelectorAll(".card")].map((n) => [n.dataset.key, n]));
  const next = items.map((req) => {
    const key = keyOf(req);
    if (old.has(key)) return old.get(key);
    const node = card(req);
    node.dataset.key = key;
    return node;
  });
  list.replaceChildren(...(next.length ? next : [el("p", { class: "empty", text: empty })]));
  $(countId).textContent = String(items.length);
  const wanted = new URLSearchParams(location.hash.slice(1)).get("request");
  if (wanted) {
    const target = document.getElementById("req-" + wanted);
    if (target) target.classList.add("flash");
  }
}

async function refresh() {
  try {
    const [pending, decided, done] = await Promise.all([
      api("/api/requests?state=pending"), api("/api/requests?state=decided"),
      api("/api/requests?state=done&limit=50")]);
    render("pending", "n-pending", pending, "nothing is waiting");
    render("decided", "n-decided", decided, "none");
    render("done", "n-done", done, "none yet");
  } catch (err) {
    if (err.message !== "unauthorised") notice(String(err.message), true);
  }
}

async function refreshChains() {
  try {
    const [report, status] = await Promise.all([api("/api/audit/verify"), api("/api/status")]);
    const badge = $("chain");
    const anchored = report.logs.every((l) => l.anchored);
    badge.textContent = !report.ok ? "audit: FAILED" : anchored ? "audit: verified"
      : "audit: intact, unanchored";
    badge.className = "badge " + (report.ok ? "ok" : "bad");
    $("chains").replaceChildren(...report.logs.map((l) => el("li", {
      text: basename(l.repo) + ": " + (l.ok ? "OK" : "FAIL") + ", " + l.records + " records" +
        (l.anchored ? ", anchored" : ", unanchored") + (l.problem ? " — " + l.problem : "") })));
    $("who").textContent = "approver: " + status.user;
    const v = status.last_verify;
    $("hostverify").textContent = v ? "last sandbox verify: " + v.passed + "/" + v.total +
      " passed, " + new Date(v.at * 1000).toISOString() : "sandbox verify has not run here";
  } catch (err) {
    if (err.message !== "unauthorised") notice(String(err.message), true);
  }
}

function scheduleRefresh(delay) {
  clearTimeout(refreshTimer);
  refreshTimer = setTimeout(() => { refresh(); refreshChains(); }, delay);
}

function live(on) {
  $("live").textContent = on ? "live" : "offline";
  $("live").className = "badge " + (on ? "on" : "off");
}

function connect() {
  const scheme = location.protocol === "https:" ? "wss://" : "ws://";
  const s = new WebSocket(scheme + location.host + "/api/events");
  socket = s;
  s.addEventListener("open", () => s.send(JSON.stringify({ token })));
  s.addEventListener("message", (msg) => {
    const data = JSON.parse(msg.data);
    if (data.hello) { live(true); scheduleRefresh(0); return; }
    for (const ev of data.events || []) {
      if (ev.type === "request" && ev.request && !document.getElementById("req-" + ev.id)) {
        const list = $("pending");
        list.querySelector(".empty")?.remove();
        const node = card(ev.request);
        node.dataset.key = keyOf(ev.request);
        list.append(node);
        $("n-pending").textContent = String(list.querySelectorAll(".card").length);
      }
    }
    scheduleRefresh(50);
  });
  s.addEventListener("close", (ev) => {
    if (socket !== s) return;  // closed on purpose
    live(false);
    if (ev.code === 4401) { showLogin("the token was refused"); return; }
    setTimeout(connect, 1000);
  });
}

function showLogin(why) {
  $("board").hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = why || "";
  const s = socket;
  socket = null;
  if (s) s.close();
}

function start() {
  $("login").hidden = true;
  $("board").hidden = false;
  connect();
}

document.addEventListener("DOMContentLoaded", () => {
  takeTokenFromFragment();
  $("login").addEventListener("submit", (ev) => {
    ev.preventDefault();
    token = $("token").value.trim();
    sessionStorage.setItem(KEY, token);
    start();
  });
  if (token) start(); else showLogin("");
});
