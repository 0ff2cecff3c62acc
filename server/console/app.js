// Forewarn approver console: plain DOM, no framework, no external asset. Every value that comes
// from an agent (tool names, arguments, messages) is set as text, never as HTML.
"use strict";

const state = { key: sessionStorage.getItem("forewarn-key") || "", generation: -1, items: [], polling: false };
const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (name === "text") node.textContent = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value);
  }
  for (const child of children) if (child) node.append(child);
  return node;
}

function newKey() {
  return (crypto.randomUUID ? crypto.randomUUID() : `${Date.now()}-${Math.random()}`).replace(/[^A-Za-z0-9-]/g, "");
}

async function api(method, path, body) {
  const headers = { Authorization: `Bearer ${state.key}` };
  if (body !== undefined) { headers["Content-Type"] = "application/json"; headers["Idempotency-Key"] = newKey(); }
  const response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const data = await response.json().catch(() => ({}));
  if (!response.ok) {
    const error = new Error((data.error && data.error.message) || `HTTP ${response.status}`);
    error.status = response.status;
    throw error;
  }
  return data;
}

const pct = (p) => (p === null || p === undefined ? "unknown" : `${(100 * p).toFixed(1)}%`);

function riskChart(points, label) {
  const ns = "http://www.w3.org/2000/svg";
  const width = 260, height = 70, pad = 12;
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("class", "chart");
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", label);
  const known = points.filter((p) => p.p_unsafe !== null && p.p_unsafe !== undefined);
  const x = (i) => pad + (points.length > 1 ? (i * (width - 2 * pad)) / (points.length - 1) : (width - 2 * pad) / 2);
  const y = (p) => height - pad - p * (height - 2 * pad);
  for (const level of [0, 0.5, 1]) {
    const line = document.createElementNS(ns, "line");
    line.setAttribute("x1", pad); line.setAttribute("x2", width - pad);
    line.setAttribute("y1", y(level)); line.setAttribute("y2", y(level));
    svg.append(line);
    const text = document.createElementNS(ns, "text");
    text.setAttribute("x", 0); text.setAttribute("y", y(level) + 3);
    text.textContent = `${level * 100}`;
    svg.append(text);
  }
  const line = document.createElementNS(ns, "polyline");
  line.setAttribute("points", points.map((p, i) => (p.p_unsafe == null ? null : `${x(i)},${y(p.p_unsafe)}`))
    .filter(Boolean).join(" "));
  svg.append(line);
  points.forEach((p, i) => {
    if (p.p_unsafe == null) return;
    const dot = document.createElementNS(ns, "circle");
    dot.setAttribute("cx", x(i)); dot.setAttribute("cy", y(p.p_unsafe)); dot.setAttribute("r", 2.5);
    const title = document.createElementNS(ns, "title");
    title.textContent = `step ${p.step}: ${pct(p.p_unsafe)}`;
    dot.append(title);
    svg.append(dot);
  });
  if (!known.length) {
    const text = document.createElementNS(ns, "text");
    text.setAttribute("x", pad); text.setAttribute("y", height / 2);
    text.textContent = "no committed step with a known risk yet";
    svg.append(text);
  }
  return svg;
}

function card(item) {
  const d = item.decision || {};
  const isProposal = item.kind === "proposal";
  const call = isProposal ? `${item.tool}` : (d.abstract_state ? "a committed step" : "a step");
  const reason = el("input", { type: "text", "aria-label": "Reason", placeholder: "Reason (sent with the decision)" });
  const args = isProposal ? el("textarea", { "aria-label": "Edited arguments (JSON)" }) : null;
  if (args) { args.value = JSON.stringify(item.arguments, null, 2); args.hidden = true; }
  const decide = (decision) => () => submit(item, decision, reason, args);
  const buttons = el("div", { class: "row" }, reason,
    el("button", { type: "button", class: "approve", text: "Approve (a)", onclick: decide("approve") }),
    el("button", { type: "button", class: "reject", text: "Reject (r)", onclick: decide("reject") }),
    isProposal ? el("button", { type: "button", text: "Edit (e)", onclick: () => {
      if (args.hidden) { args.hidden = false; args.focus(); } else decide("edit")();
    } }) : null,
    el("button", { type: "button", text: "Session trail (s)", onclick: () => showTrail(item.session_id) }));
  const risk = item.risk || { p_unsafe: d.p_unsafe, ci_low: d.ci_low, ci_high: d.ci_high };
  const interval = risk.ci_low != null && risk.ci_high != null ? ` (interval ${pct(risk.ci_low)}–${pct(risk.ci_high)})` : "";
  const node = el("li", { class: "card", tabindex: "0", "data-id": item.id, "aria-label": `Pending ${call}` },
    el("h3", { text: isProposal ? `Proposed call: ${item.tool}` : `Approval of step ${item.step}` }),
    isProposal ? el("pre", { class: "args", text: JSON.stringify(item.arguments, null, 2) }) : null,
    el("p", { class: "why" }, el("span", { class: "risk", text: `Risk ${pct(risk.p_unsafe)}${interval}` }),
      document.createTextNode(` · action ${d.action || "?"} · session ${item.session_id}`)),
    item.edit_of ? el("p", { class: "why", text: `An edit, re-checked by the agent (edited proposal ${item.edit_of})` }) : null,
    ...reviewLines(item, risk),
    item.state_words ? el("p", { class: "why", text: `Leads to: ${item.state_words}` }) : null,
    d.message ? el("p", { class: "why", text: d.message }) : null,
    movesLine(d),
    item.session_risk ? riskChart(item.session_risk, `the session's risk over ${item.session_risk.length} steps`) : null,
    args, buttons);
  node.addEventListener("keydown", (event) => {
    if (event.target.tagName === "INPUT" || event.target.tagName === "TEXTAREA") return;
    const go = { a: "approve", r: "reject" }[event.key];
    if (go) { event.preventDefault(); decide(go)(); }
    else if (event.key === "e" && args) { event.preventDefault(); args.hidden = false; args.focus(); }
    else if (event.key === "s") { event.preventDefault(); showTrail(item.session_id); }
    else if (event.key === "j" || event.key === "k") {
      event.preventDefault();
      const cards = [...document.querySelectorAll(".card")];
      const next = cards[cards.indexOf(node) + (event.key === "j" ? 1 : -1)];
      if (next) next.focus();
    }
  });
  return node;
}

// With the model's MDP (docs/shield.md): the call's own move and the other moves from where the run stands,
// safest first, each with its risk and interval.
function movesLine(d) {
  const moves = (d.alternatives || []).filter((m) => !d.proposed || m.action_class !== d.proposed.action_class);
  if (!moves.length && !d.proposed) return null;
  const span = (m) => (m.ci_low != null && m.ci_high != null ? ` (${pct(m.ci_low)}–${pct(m.ci_high)})` : "");
  const own = d.proposed ? `This move, ${d.proposed.action_class}: ${pct(d.proposed.risk)}${span(d.proposed)}. ` : "";
  const others = moves.slice(0, 4).map((m) => `${m.action_class} ${pct(m.risk)}${span(m)}`).join("; ");
  return el("p", { class: "why moves", text: `${own}${others ? `Next moves from here, safest first: ${others}` : ""}` });
}

// What an approver needs in five seconds: the rule at stake, what the call changes, the risk before and
// after with its evidence, the likeliest way on to a violation, what each answer does and until when the
// agent waits (server/proposals.py review_facts).
function reviewLines(item, risk) {
  const review = item.review;
  if (!review) return [];
  const evidence = (r) => `${pct(r.p_unsafe)}${r.ci_low != null && r.ci_high != null ? ` [${pct(r.ci_low)}–${pct(r.ci_high)}]` : ""}`
    + `${r.visits != null ? `, ${r.visits} visits` : ""}`;
  const changes = review.changes.map((c) => `${c.holds ? "now" : "no longer"}: ${c.description || c.predicate}`);
  const tool = item.tool || "the call";
  return [
    review.rule ? el("p", { class: "rule", text: `Rule at stake: ${review.rule}` }) : null,
    changes.length ? el("p", { class: "changes", text: `This call changes — ${changes.join("; ")}` }) : null,
    el("p", { class: "before-after", text: `Risk ${review.before ? evidence(review.before) : "at the start"} → ${evidence(risk)}` }),
    el("p", { class: "path", text: pathWords(review.path, item.decision || {}) }),
    review.request ? el("p", { class: "request", text: `The user asked: “${review.request}”` }) : null,
    metadataLine(review.metadata),
    el("p", { class: "effects", text: `Approve: ${tool} runs once, with the arguments above; any other call, `
      + `this one again included, is judged anew. Reject: ${tool} does not run and the agent is told your `
      + `reason; if it proposes the call again, the guard judges it again.` }),
    deadlineLine(review.deadline, tool),
    review.irreversible ? el("p", { class: "irreversible", text: "This call cannot be undone: a reason is required." }) : null,
  ];
}

// The run's metadata as the agent opened the session with it ("env: production"), in words.
function metadataLine(metadata) {
  const entries = Object.entries(metadata || {});
  if (!entries.length) return null;
  const shown = entries.slice(0, 12).map(([k, v]) => `${k}: ${typeof v === "string" ? v : JSON.stringify(v)}`);
  return el("p", { class: "metadata", text: `Run: ${shown.join(" · ")}${entries.length > 12 ? " · …" : ""}` });
}

// The most likely way from the state the call leads to into a violation, as `forewarn states` finds it,
// told as the conditions each step makes hold (or stop holding).
function pathWords(path, decision) {
  if (decision.unsafe_now) return "Path to a violation: this call itself breaks the rule.";
  if (!path) {
    return decision.known === false ? "Path to a violation: unknown (the learned runs never were where this call leads)."
      : "Path to a violation: none seen from there in the learned runs.";
  }
  const steps = path.steps.map((step) => step.changes.map((c) => `${c.holds ? "" : "no longer "}${c.description || c.predicate}`)
    .join(" and ") || "a watched rule moves on");
  return `Likeliest path to a violation (${pct(path.probability)} of runs from there take it): `
    + `${steps.length ? steps.join(" → ") : "there is one already"} → violation`;
}

function deadlineLine(deadline, tool) {
  if (deadline == null) return el("p", { class: "deadline", text: "The agent did not say how long it waits." });
  const node = el("p", { class: "deadline" });
  node.dataset.deadline = String(deadline);
  node.dataset.tool = tool;
  tickDeadline(node);
  return node;
}

function tickDeadline(node) {
  const at = Number(node.dataset.deadline);
  const left = Math.round(at - Date.now() / 1000);
  const when = new Date(at * 1000).toLocaleTimeString();
  const span = left >= 60 ? `${Math.floor(left / 60)} min ${left % 60} s` : `${left} s`;
  node.textContent = left > 0 ? `The agent gives up waiting at ${when} (in ${span}): then ${node.dataset.tool} does not run.`
    : `The agent stopped waiting at ${when}: ${node.dataset.tool} does not run, whatever you answer.`;
}

setInterval(() => document.querySelectorAll(".deadline[data-deadline]").forEach(tickDeadline), 1000);

async function submit(item, decision, reason, args) {
  if (item.review && item.review.irreversible && !reason.value.trim()) {
    reason.setAttribute("aria-invalid", "true");
    reason.placeholder = "A reason is required: this call cannot be undone";
    reason.focus();
    return;
  }
  $("desk-error").textContent = "";
  const body = { decision, reason: reason.value || null };
  try {
    if (decision === "edit") body.arguments = JSON.parse(args.value);
    const path = item.kind === "proposal" ? `/v1/proposals/${item.id}` : `/v1/approvals/${item.id}`;
    await api("POST", path, body);
    await refresh();
  } catch (error) {
    $("desk-error").textContent = `Could not ${decision}: ${error.message}`;
  }
}

const KIND_WORDS = { opened: "session opened", proposed: "asked about a call", step: "step",
  approval_requested: "approval asked", approved: "approved", rejected: "rejected", edited: "edited",
  cancelled: "withdrawn", closed: "session closed" };

// Everything that happened in the session, in order: its requests (proposals), the answers and who gave
// them, the steps with the guard's decision (GET /v1/sessions/{id}/trail).
async function showTrail(sessionId) {
  let data;
  try {
    data = await api("GET", `/v1/sessions/${encodeURIComponent(sessionId)}/trail?limit=1000`);
  } catch (error) {
    $("desk-error").textContent = `Could not show the trail of ${sessionId}: ${error.message}`;
    return;
  }
  const events = data.events || [];
  const steps = events.filter((e) => e.kind === "step");
  $("trail").hidden = false;
  $("trail-title").textContent = `Audit trail of session ${sessionId} (${data.session.status}, ${data.events_total} events)`;
  $("trail-chart").replaceChildren(riskChart(steps.map((s) => ({ step: s.step, p_unsafe: s.p_unsafe })),
    `risk over ${steps.length} steps`));
  $("trail-table").tBodies[0].replaceChildren(...events.map((e) => el("tr", { class: `event ${e.kind}` },
    el("td", { text: new Date(e.at * 1000).toLocaleTimeString() }),
    el("td", { text: `${KIND_WORDS[e.kind] || e.kind}${e.step != null ? ` (step ${e.step})` : ""}`
      + `${e.kind === "proposed" && e.waited ? " — a person decides" : ""}` }),
    el("td", { text: e.tool ? `${e.tool}${e.arguments ? ` ${JSON.stringify(e.arguments)}` : ""}` : "" }),
    el("td", { text: e.action ? `${e.action} · ${pct(e.p_unsafe)}` : "" }),
    el("td", { text: e.by || "" }), el("td", { text: e.reason || "" }))));
}

// The sessions view: searched on the server (GET /v1/sessions?session_id&tool&decision&since&until).
async function searchSessions() {
  const params = new URLSearchParams();
  const put = (name, value) => { if (value) params.set(name, value); };
  put("session_id", $("q-session").value.trim());
  put("tool", $("q-tool").value.trim());
  put("decision", $("q-decision").value);
  const seconds = (value) => (value ? String(new Date(value).getTime() / 1000) : "");
  put("since", seconds($("q-since").value));
  put("until", seconds($("q-until").value));
  $("sessions-error").textContent = "";
  try {
    const data = await api("GET", `/v1/sessions?${params}`);
    $("sessions-table").tBodies[0].replaceChildren(...data.sessions.map((s) => el("tr", {},
      el("td", {}, el("button", { type: "button", class: "link", text: s.id, "aria-label": `Trail of session ${s.id}`,
        onclick: () => showTrail(s.id) })),
      el("td", { text: new Date(s.created_at * 1000).toLocaleString() }), el("td", { text: s.status }),
      el("td", { text: String(s.steps_total) }), el("td", { text: s.model.name }))));
    if (!data.sessions.length) $("sessions-error").textContent = "No session matches.";
  } catch (error) {
    $("sessions-error").textContent = `Could not search: ${error.message}`;
  }
}

// One refresh at a time: the live update and a decision both refresh, and two running side by side
// could finish out of order, leaving the older view on screen. A refresh asked for meanwhile runs
// once more after the current one; its callers wait for that.
let refreshing = null;
let refreshAgain = false;

function refresh() {
  if (refreshing) { refreshAgain = true; return refreshing; }
  refreshing = (async () => {
    try {
      do { refreshAgain = false; await render(); } while (refreshAgain);
    } finally {
      refreshing = null;
    }
  })();
  return refreshing;
}

async function render() {
  const [proposals, approvals, allProposals, allApprovals] = await Promise.all([
    api("GET", "/v1/proposals?status=pending"), api("GET", "/v1/approvals?status=pending"),
    api("GET", "/v1/proposals?status=all&limit=1000"), api("GET", "/v1/approvals?status=all&limit=1000")]);
  const detailed = await Promise.all(proposals.proposals.map((p) => api("GET", `/v1/proposals/${p.id}`)));
  const items = [...detailed.map((p) => ({ ...p, kind: "proposal" })),
                 ...approvals.approvals.map((a) => ({ ...a, kind: "approval" }))];
  // keep the cards already shown (a reason being typed survives a live update); add the new ones
  const shown = new Map([...document.querySelectorAll(".card")].map((node) => [node.dataset.id, node]));
  const same = items.length === shown.size && items.every((item, i) => $("pending").children[i].dataset.id === item.id);
  if (!same) {  // (re-inserting a node drops its focus: put it back)
    const focused = document.activeElement;
    $("pending").replaceChildren(...items.map((item) => shown.get(item.id) || card(item)));
    if (focused && focused !== document.body && document.contains(focused)) focused.focus();
  }
  $("count").textContent = String(items.length);
  $("empty").hidden = items.length > 0;
  const resolved = [...allProposals.proposals.map((p) => ({ ...p, what: `call ${p.tool}` })),
                    ...allApprovals.approvals.map((a) => ({ ...a, what: `step ${a.step}` }))]
    .filter((r) => r.resolved_at).sort((x, y) => y.resolved_at - x.resolved_at).slice(0, 12);
  const words = { executed: "approved (and ran)" };
  $("recent").replaceChildren(...resolved.map((r) => el("li", {
    text: `${new Date(r.resolved_at * 1000).toLocaleTimeString()} — ${words[r.status] || r.status} ${r.what} (session ${r.session_id}) by ${r.resolved_by}${r.reason ? `: ${r.reason}` : ""}` })));
  const first = document.querySelector(".card");
  if (first && !document.querySelector(".card:focus-within")) first.focus();
}

async function follow() {
  if (state.polling) return;
  state.polling = true;
  while (state.key) {
    try {
      const { generation } = await api("GET", `/v1/changes?since=${state.generation}&wait=25`);
      if (generation !== state.generation) { state.generation = generation; await refresh(); }
      $("live").textContent = "live";
    } catch (error) {
      $("live").textContent = `reconnecting (${error.message})`;
      if (error.status === 401 || error.status === 403) { signOut(error.message); break; }
      await new Promise((done) => setTimeout(done, 2000));
    }
  }
  state.polling = false;
}

async function signIn(key) {
  state.key = key;
  try {
    await api("GET", "/v1/changes?since=-1");  // an approver's or admin's endpoint
  } catch (error) {
    state.key = "";
    sessionStorage.removeItem("forewarn-key");
    $("signin-error").textContent = error.status === 403
      ? "This key cannot approve (it is not an approver or admin key)." : `Sign-in failed: ${error.message}`;
    return;
  }
  sessionStorage.setItem("forewarn-key", key);
  $("signin").hidden = true;
  $("desk").hidden = false;
  $("signout").hidden = false;
  $("who").textContent = "Signed in as an approver";
  state.generation = -1;
  follow();
  searchSessions();
}

function signOut(message) {
  state.key = "";
  sessionStorage.removeItem("forewarn-key");
  $("desk").hidden = true;
  $("signin").hidden = false;
  $("signout").hidden = true;
  $("who").textContent = "";
  $("signin-error").textContent = message || "";
  $("key").focus();
}

document.addEventListener("DOMContentLoaded", () => {
  $("signin-form").addEventListener("submit", (event) => { event.preventDefault(); signIn($("key").value); });
  $("search-form").addEventListener("submit", (event) => { event.preventDefault(); searchSessions(); });
  $("signout").addEventListener("click", () => signOut());
  if (state.key) signIn(state.key);
});
