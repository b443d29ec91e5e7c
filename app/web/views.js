"use strict";
// The overview pages: jobs, the queue, GPUs.

const STATUSES = ["queued", "starting", "running", "restarting", "preempting", "cancelling", "succeeded", "failed",
  "timed_out", "cancelled", "pruned"];

function jobsView(root, signal) {
  const selected = new Set();
  const compare = h("button", { disabled: true, onclick: () => { location.hash = `#/compare?ids=${[...selected]}`; } },
    "Compare");
  const filter = h("select", { onchange: () => refresh() },
    h("option", { value: "" }, "all statuses"), STATUSES.map((s) => h("option", { value: s }, s)));
  const body = h("div");
  root.append(h("div", { class: "toolbar" }, h("h2", {}, "Jobs"), filter, compare), body);

  const pick = (id, checked) => {
    if (checked) selected.add(id);
    else selected.delete(id);
    compare.disabled = selected.size === 0;
  };
  const row = (job) => {
    const ran = runSeconds(job);
    return h("tr", { "data-job": job.id },
      h("td", {}, h("input", { type: "checkbox", checked: selected.has(job.id), title: "select to compare",
        onchange: (e) => pick(job.id, e.target.checked) })),
      h("td", {}, jobLink(job.id)),
      h("td", {}, jobLink(job.id, job.name), failure(job),
        job.parent_id ? h("div", { class: "row-note" }, "from ", jobLink(job.parent_id)) : null),
      h("td", {}, statusBadge(job.status), job.queue_position ? ` #${job.queue_position} in queue` : ""),
      h("td", { class: "wide" }, progressBar(job.progress)),
      h("td", {}, job.plan.strategy || ""),
      h("td", { class: "nowrap" }, devicesText(job)),
      h("td", {}, job.plan.precision || ""),
      h("td", { class: "num" }, ran === null ? "" : formatDuration(ran)),
      h("td", { class: "num" }, formatNumber(job.latest_metrics.loss)),
      h("td", { class: "num" }, formatNumber(job.latest_metrics.eval_accuracy)),
      h("td", { class: "nowrap" }, shortTime(job.created_at)));
  };
  const refresh = async () => {
    const status = filter.value ? `&status=${filter.value}` : "";
    const page = await api.get(`/v1/jobs?limit=100${status}`, signal);
    body.replaceChildren(table(["", "id", "name", "status", "progress", "strategy", "devices", "precision", "ran for",
      "loss", "eval acc", "submitted"], page.data.map(row), "No jobs yet: POST a spec to /v1/jobs."));
  };
  every(POLL_MS, signal, refresh);
}

/** Why a failed or timed-out job ended, under its name: the reason, and the message in full on hover. */
function failure(job) {
  if (job.status !== "failed" && job.status !== "timed_out") return null;
  const text = [job.status_reason, job.message].filter(Boolean).join(": ");
  return h("div", { class: "row-reason", title: text }, text);
}

/** The server's /v1/queue, or on a server without one, queued jobs in queue order. */
async function queueEntries(signal) {
  const queue = await api.optional("/v1/queue", signal);
  if (queue) return queue;
  const page = await api.get("/v1/jobs?status=queued&limit=200", signal);
  const data = page.data
    .map((job) => ({ position: job.queue_position, job_id: job.id, name: job.name, priority: job.priority,
      wants: "", reason: job.message || job.status_reason || "", created_at: job.created_at }))
    .sort((a, b) => a.position - b.position);
  return { data, fair_share: null };
}

/** When a queued job would start if the jobs ahead run as long as forecast; why not known, on hover. */
function startsIn(entry) {
  if (entry.starts_in_s === null || entry.starts_in_s === undefined) return "-";
  return entry.starts_in_s === 0 ? "now" : formatDuration(entry.starts_in_s);
}

function queueView(root, signal) {
  const body = h("div");
  root.append(h("h2", {}, "Queue"), body);
  every(POLL_MS, signal, async () => {
    const queue = await queueEntries(signal);
    const rows = queue.data.map((e) => h("tr", { "data-job": e.job_id },
      h("td", { class: "num" }, String(e.position ?? "")),
      h("td", {}, jobLink(e.job_id)),
      h("td", {}, e.name),
      h("td", { class: "num" }, String(e.priority)),
      h("td", {}, e.wants || ""),
      h("td", { class: "num", title: e.starts_in_note || "" }, startsIn(e)),
      h("td", {}, e.reason || ""),
      h("td", {}, formatTime(e.created_at))));
    // Fair share: why users' jobs of one priority start in this order ("bob has used 0.3 GPU-h, ada 14.2").
    const share = queue.fair_share ? [h("p", { class: "fair-share" }, queue.fair_share)] : [];
    body.replaceChildren(...share, table(["position", "job", "name", "priority", "wants", "starts in",
      "waiting because", "submitted"], rows, "Nothing is waiting."));
  });
}

function gpusView(root, signal) {
  const body = h("div");
  root.append(h("h2", {}, "GPUs"), body);
  const known = new Set(["index", "name", "memory_total_mb", "job_id", "health", "health_reason"]);
  const gpuRow = (gpu) => h("tr", { "data-health": gpu.health },
    h("td", { class: "num" }, String(gpu.index)),
    h("td", {}, gpu.name || ""),
    h("td", { class: "num" }, gpu.memory_total_mb ? formatBytes(gpu.memory_total_mb * 2 ** 20) : ""),
    // Workers may report more (utilisation, memory used): shown as they come.
    h("td", {}, Object.entries(gpu).filter(([k]) => !known.has(k)).map(([k, v]) => `${k} ${v}`).join(" · ")),
    h("td", {}, h("span", { class: `status health-${gpu.health}` }, gpu.health),
      gpu.health_reason ? h("div", { class: "why" }, gpu.health_reason) : ""),
    h("td", {}, gpu.job_id ? jobLink(gpu.job_id) : h("span", { class: "free" }, "free")));
  every(POLL_MS * 2, signal, async () => {
    const hosts = (await api.get("/v1/gpus", signal)).data;
    body.replaceChildren(...(hosts.length ? hosts.map((host) => h("section", { class: "card", "data-host": host.host },
      h("h3", {}, host.host, h("small", {}, ` worker ${host.worker_id} · seen ${formatTime(host.heartbeat_at)}`)),
      table(["gpu", "model", "memory", "reported", "health", "held by"], host.gpus.map(gpuRow),
        "No GPUs on this host: it runs CPU jobs."))) : [h("p", { class: "empty" }, "No worker is running.")]));
  });
}
