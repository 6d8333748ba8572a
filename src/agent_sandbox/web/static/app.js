// The approvals dashboard: lists the queue through the API, follows /api/events, and
// approves or denies a request as it was shown (its hash goes with the decision).
// Every value from the server is placed with textContent, never parsed as markup; the
// request's fields arrive already escaped for display ("shown").
//
// The token never leaves this page. Pasted into the form, it becomes a non-extractable
// HMAC key held in this tab's memory only (not in any storage: a page served later on
// this origin, by whoever holds the port then, could read storage); a reload asks for
// it again. The page logs in by challenge and answer: the server first proves it holds
// the token (its HMAC over both nonces and this origin), and only then does the page
// answer with its own HMAC (another label) and get a session id, which it sends with
// each call and as the WebSocket's first message. Whenever the socket drops the page
// logs in again the same way, so a listener that took the port meanwhile never gets
// anything it can use. A token in the address (#token=) is never used.
//
// A card's Approve and Deny act only once the card has been on screen, at its place,
// for SETTLE_MS (as `sandbox watch` does): a click meant for a card that went away
// never decides the one that slid under the pointer.
"use strict";

const CLIENT = "agent-sandbox web login client v1";
const SERVER = "agent-sandbox web login server v1";
const SETTLE_MS = 600;
let key = null;          // the token as an HMAC key (never the token's text)
let session = "";
let socket = null;
let refreshTimer = null;
let loggingIn = null;    // the login under way, if any
let retryTimer = null;
const placed = new WeakMap();  // card -> {where, since}: when it came to its place
const $ = (id) => document.getElementById(id);
const utf8 = (text) => new TextEncoder().encode(text);

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

class LoginError extends Error {}

function b64url(bytes) {
  return btoa(String.fromCharCode(...bytes)).replace(/\+/g, "-").replace(/\//g, "_")
    .replace(/=+$/, "");
}

function hex(buffer) {
  return [...new Uint8Array(buffer)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

function unhex(text) {
  return new Uint8Array(text.match(/../g).map((h) => parseInt(h, 16)));
}

function message(label, serverNonce, clientNonce) {
  return utf8([label, location.origin, serverNonce, clientNonce].join("|"));
}

async function takeToken(token) {
  if (!window.isSecureContext || !crypto.subtle) {
    throw new LoginError("this page is not a secure context (open it on loopback or " +
      "over https): it cannot log in without sending the token");
  }
  key = await crypto.subtle.importKey("raw", utf8(token), { name: "HMAC", hash: "SHA-256" },
    false, ["sign", "verify"]);
}

async function post(path, body) {
  const res = await fetch(path, { method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body), cache: "no-store" });
  return { status: res.status, body: await res.json().catch(() => ({})) };
}

async function loginOnce() {
  // challenge and answer; the session id, or a LoginError that says why not
  const nonce = new Uint8Array(32);
  crypto.getRandomValues(nonce);
  const clientNonce = b64url(nonce);
  const ch = await post("/api/login/challenge", { origin: location.origin,
    client_nonce: clientNonce });
  if (ch.status !== 200) throw new Error("login challenge: " + ch.status);
  const serverNonce = String(ch.body.server_nonce || "");
  const serverProof = String(ch.body.server_proof || "");
  const proven = /^[0-9a-f]{64}$/.test(serverProof) && /^[A-Za-z0-9_-]{22,86}$/.test(serverNonce) &&
    await crypto.subtle.verify("HMAC", key, unhex(serverProof),
      message(SERVER, serverNonce, clientNonce));
  if (!proven) {
    throw new Error("the server on this port did not prove it holds the token: nothing " +
      "was sent to it");
  }
  const proof = hex(await crypto.subtle.sign("HMAC", key, message(CLIENT, serverNonce, clientNonce)));
  const answer = await post("/api/login", { server_nonce: serverNonce, proof });
  if (answer.status === 401) throw new LoginError("the token was refused");
  if (answer.status !== 200 || typeof answer.body.session !== "string") {
    throw new Error("login: " + answer.status);
  }
  return answer.body.session;
}

function establish() {
  // log in (again), then follow the events; retried until it works or the token is refused
  if (loggingIn || !key) return loggingIn;
  clearTimeout(retryTimer);
  session = "";
  loggingIn = (async () => {
    try {
      session = await loginOnce();
      connect();
    } catch (err) {
      live(false);
      if (err instanceof LoginError) { key = null; showLogin(err.message); return; }
      notice("offline: " + (err.message || String(err)) + "; trying again", true);
      retryTimer = setTimeout(establish, 1000);
    } finally {
      loggingIn = null;
    }
  })();
  return loggingIn;
}

async function api(path, options) {
  const opts = Object.assign({ headers: {}, cache: "no-store" }, options || {});
  opts.headers = Object.assign({ Authorization: "Session " + session }, opts.headers);
  if (!session) throw new Error("unauthorised");
  const res = await fetch(path, opts);
  if (res.status === 401) {
    establish();  // the session ended (a restart, its age): log in again
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
  if (req.cannot_show) {
    node.append(el("div", { class: "warn", text: "cannot be shown whole: " + req.cannot_show }));
  }
  const actions = el("div", { class: "actions" });
  if (req.state === "pending") {
    const reason = el("input", { type: "text", placeholder: "reason (told to the agent)",
      class: "reason", maxlength: "2000" });
    const approve = req.cannot_show ? null : el("button", { class: "approve", text: "Approve" });
    const deny = el("button", { class: "deny", text: "Deny" });
    const settle = el("span", { class: "settle" });
    const enable = (on) => { if (approve) approve.disabled = !on; deny.disabled = !on; };
    const decide = async (verb) => {
      notePlaces();
      const at = placed.get(node);
      if (!at || performance.now() - at.since < SETTLE_MS) {
        settle.textContent = "too early: this request has just come to this place; look " +
          "at it, then click again";
        return;
      }
      settle.textContent = "";
      enable(false);
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
        enable(true);
      }
      scheduleRefresh(0);
    };
    if (approve) approve.addEventListener("click", () => decide("approve"));
    deny.addEventListener("click", () => decide("deny"));
    actions.append(...[approve, deny, reason, settle].filter(Boolean));
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

function notePlaces() {
  // when each pending card came to its place on screen: a card that is new, moved,
  // resized, off screen or in a hidden tab starts again
  const now = performance.now();
  const visible = document.visibilityState === "visible";
  for (const node of document.querySelectorAll("#pending .card")) {
    const r = node.getBoundingClientRect();
    const onScreen = visible && r.bottom > 0 && r.top < window.innerHeight && r.height > 0;
    const where = [r.top + window.scrollY, r.left + window.scrollX, r.width, r.height]
      .map(Math.round).join(",");
    const seen = placed.get(node);
    if (!onScreen) placed.delete(node);
    else if (!seen || seen.where !== where) placed.set(node, { where, since: now });
  }
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
  notePlaces();
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
    showDrift(status.last_drift_check);
  } catch (err) {
    if (err.message !== "unauthorised") notice(String(err.message), true);
  }
}

// The host's last drift check: plain about drift, one line per drifted file or failed check.
function showDrift(d) {
  const line = $("hostdrift");
  if (!d) {
    line.textContent = "drift check: has not run on this host";
    line.className = "";
  } else if (d.at === null) {
    line.textContent = "drift check: UNKNOWN: " + d.error;
    line.className = "bad";
  } else {
    const when = new Date(d.at * 1000).toISOString();
    line.textContent = d.clean ? "drift check: clean, " + when
      : "drift check: DRIFT FOUND, " + when + ": " + d.drifted.length + " file(s) drifted, " +
        d.failed_checks.length + " check(s) failed" + (d.error ? "; " + d.error : "");
    line.className = d.clean ? "ok" : "bad";
  }
  $("drifted").replaceChildren(...(d && d.at !== null ? [
    ...d.drifted.map((f) => el("li", { text: f.problem + ": " + f.target })),
    ...d.failed_checks.map((c) => el("li", { text: "check " + c.name + ": " + c.detail })),
  ] : []));
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
  // the events, with the session just opened (never the token)
  const scheme = location.protocol === "https:" ? "wss://" : "ws://";
  const s = new WebSocket(scheme + location.host + "/api/events");
  const mine = session;
  const old = socket;
  socket = s;
  if (old) old.close();
  s.addEventListener("open", () => s.send(JSON.stringify({ session: mine })));
  s.addEventListener("message", (msg) => {
    const data = JSON.parse(msg.data);
    if (data.hello) { live(true); notice(""); scheduleRefresh(0); return; }
    for (const ev of data.events || []) {
      if (ev.type === "request" && ev.request && !document.getElementById("req-" + ev.id)) {
        const list = $("pending");
        list.querySelector(".empty")?.remove();
        const node = card(ev.request);
        node.dataset.key = keyOf(ev.request);
        list.append(node);
        $("n-pending").textContent = String(list.querySelectorAll(".card").length);
        notePlaces();
      }
    }
    scheduleRefresh(50);
  });
  s.addEventListener("close", () => {
    if (socket !== s) return;  // closed on purpose
    socket = null;
    live(false);
    session = "";
    retryTimer = setTimeout(establish, 1000);  // log in again, the same way
  });
}

function showLogin(why) {
  $("board").hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = why || "";
  clearTimeout(retryTimer);
  session = "";
  const s = socket;
  socket = null;
  if (s) s.close();
}

function start() {
  $("login").hidden = true;
  $("board").hidden = false;
  establish();
}

document.addEventListener("DOMContentLoaded", () => {
  let warning = "";
  if (/(^|[#&])token=/.test(location.hash.slice(1))) {
    // never used: a token in an address is in the browser's history and its command line
    history.replaceState(null, "", location.pathname);
    warning = "a token in the address is never used, and it is now in this browser's " +
      "history: run `sandbox serve --rotate-token`, then paste the new token here";
  }
  $("login").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const field = $("token");
    const token = field.value.trim();
    field.value = "";
    try {
      await takeToken(token);
    } catch (err) {
      showLogin(err.message || String(err));
      return;
    }
    start();
  });
  document.addEventListener("visibilitychange", notePlaces);
  window.addEventListener("scroll", notePlaces, { passive: true });
  window.addEventListener("resize", notePlaces);
  setInterval(notePlaces, 100);
  showLogin(warning);
});
