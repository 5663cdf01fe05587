// genloop console: follows a run's event stream and refreshes the server-rendered parts an
// event changed. No framework, no build step; shipped with the package.
"use strict";

const EVENT_TYPES = [
  "run.submitted", "run.running", "run.succeeded", "run.failed", "run.cancelled",
  "run.cancelling", "run.resumed", "node.queued", "node.running", "node.succeeded",
  "node.failed", "node.skipped", "node.cancelled", "instance.started", "instance.succeeded",
  "instance.failed", "instance.cancelled", "instance.retry", "instance.quarantined",
  "progress", "refine.requested", "refine.answered", "message",
];
const TERMINAL = new Set(["run.succeeded", "run.failed", "run.cancelled"]);
const REFRESH_ON = /^(node\.|instance\.(succeeded|failed)|run\.)/;
const MAX_LOG = 500;

function followRun(section) {
  const runId = section.dataset.run;
  const nodes = new Map();   // node id -> {status, instances: Map(instance id -> status)}
  const log = document.getElementById("log");
  const rounds = document.getElementById("rounds");
  let refreshTimer = null;

  function node(id) {
    if (!nodes.has(id)) nodes.set(id, {status: null, instances: new Map()});
    return nodes.get(id);
  }

  function drawNode(id) {
    const g = section.querySelector(`g.node[data-node="${CSS.escape(id)}"]`);
    if (!g) return;
    const n = node(id);
    const counts = {};
    for (const s of n.instances.values()) counts[s] = (counts[s] || 0) + 1;
    const total = n.instances.size;
    const parts = [];
    if (total) parts.push(`${counts.succeeded || 0}/${total} done`);
    if (counts.running) parts.push(`${counts.running} running`);
    if (counts.failed) parts.push(`${counts.failed} failed`);
    if (n.status) {
      g.setAttribute("class", `node s-${n.status}`);
      g.querySelector(".state").textContent = n.status;
    }
    g.querySelector(".inst").textContent = parts.length ? " · " + parts.join(" · ") : "";
    g.setAttribute("aria-label", `${id}: ${n.status || "pending"}${parts.length ? ", " + parts.join(", ") : ""}`);
  }

  function addLog(ev) {
    const li = document.createElement("li");
    li.className = "ev " + ev.type.replace(/\./g, "-") + (ev.error ? " error" : "");
    const time = new Date(ev.time * 1000).toLocaleTimeString();
    let text = `${time}  ${ev.type}`;
    if (ev.node_id) text += `  ${ev.instance_id || ev.node_id}`;
    if (ev.attempt) text += `  attempt ${ev.attempt}`;
    if (ev.step != null && ev.total) text += `  ${ev.step}/${ev.total}`;
    if (ev.message) text += `  ${ev.message.length > 160 ? ev.message.slice(0, 160) + "…" : ev.message}`;
    if (ev.error) text += `  ${ev.error}`;
    li.textContent = text;
    li.dataset.id = ev.id;
    log.appendChild(li);
    while (log.children.length > MAX_LOG) log.removeChild(log.firstChild);
  }

  function refreshRounds() {
    clearTimeout(refreshTimer);
    refreshTimer = setTimeout(async () => {
      const response = await fetch(rounds.dataset.src, {credentials: "same-origin"});
      if (response.ok) rounds.innerHTML = await response.text();
    }, 250);
  }

  function setStatus(status) {
    const badge = document.getElementById("run-status");
    badge.textContent = status;
    badge.className = `status s-${status}`;
    section.dataset.status = status;
  }

  function apply(ev) {
    addLog(ev);
    if (ev.type === "progress" && ev.total) {
      const bar = document.getElementById("progress");
      bar.max = ev.total;
      bar.value = ev.step;
      document.getElementById("progress-text").textContent =
        `${ev.node_id || ""} step ${ev.step} of ${ev.total}`;
    } else if (ev.type.startsWith("instance.") && ev.node_id && ev.instance_id) {
      const status = {retry: "queued", quarantined: "failed"}[ev.type.slice(9)] || ev.status;
      if (status) node(ev.node_id).instances.set(ev.instance_id, status);
      drawNode(ev.node_id);
    } else if (ev.type.startsWith("node.") && ev.node_id) {
      node(ev.node_id).status = ev.status || ev.type.slice(5);
      drawNode(ev.node_id);
    } else if (ev.type.startsWith("run.") && ev.status) {
      setStatus(ev.status);
    }
    if (REFRESH_ON.test(ev.type)) refreshRounds();
  }

  const source = new EventSource(`/ui/runs/${encodeURIComponent(runId)}/events`);
  for (const type of EVENT_TYPES) {
    source.addEventListener(type, (message) => {
      const ev = JSON.parse(message.data);
      apply(ev);
      if (TERMINAL.has(ev.type)) {
        source.close();
        for (const id of ["cancel", "resume"]) document.getElementById(id).disabled = true;
      }
    });
  }
}

document.addEventListener("DOMContentLoaded", () => {
  const section = document.querySelector("section.run[data-run]");
  if (section) followRun(section);
});
