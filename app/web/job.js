"use strict";
// One job: status and progress, live curves, logs per rank, state events, checkpoints, and Cancel.

// Chart title -> the metric names it overlays.
const JOB_CHARTS = [
  ["loss", ["loss", "eval_loss"]],
  ["eval accuracy", ["eval_accuracy"]],
  ["learning rate", ["lr"]],
];
const LOG_TAIL_CHARS = 200_000;

function jobView(root, signal, jobId) {
  let job = null;
  const live = () => !job || !TERMINAL.has(job.status);
  const header = h("section", { class: "card" });
  const latest = h("div", { class: "latest" });
  const charts = h("div", { class: "charts" });
  const events = h("div");
  const checkpoints = h("div");
  const logs = logPanel(jobId, signal);
  root.append(header, latest, charts,
    h("section", { class: "card" }, h("h3", {}, "Logs"), logs.element),
    h("div", { class: "columns" },
      h("section", { class: "card" }, h("h3", {}, "State events"), events),
      h("section", { class: "card" }, h("h3", {}, "Checkpoints"), checkpoints)));

  const byMetric = new Map();
  for (const [title, names] of JOB_CHARTS) {
    const holder = h("div", { class: "chart", "data-metric": names[0] });
    charts.append(holder);
    const chart = new StepChart(holder, title, names);
    signal.addEventListener("abort", () => chart.destroy());
    names.forEach((name, i) => byMetric.set(name, [chart, i]));
  }
  const plot = (rows) => {
    for (const [name, [chart, index]] of byMetric) {
      const points = rows.filter((r) => r.name === name).map((r) => [r.step, r.value]);
      if (points.length) chart.add(index, points);
    }
  };

  const cancel = h("button", { class: "danger", onclick: async () => {
    cancel.disabled = true;
    try {
      render(await api.post(`/v1/jobs/${jobId}/cancel`));
    } catch (error) {
      showError(error);
      cancel.disabled = false;
    }
  } }, "Cancel");

  const render = (fresh) => {
    job = fresh;
    cancel.disabled = !live() || job.status === "cancelling";
    header.replaceChildren(
      h("div", { class: "toolbar" }, h("h2", {}, `#${job.id} ${job.name}`), statusBadge(job.status), cancel),
      progressBar(job.progress),
      h("dl", { class: "facts" }, facts(job).filter(([, v]) => v).map(([k, v]) => h("div", {}, h("dt", {}, k), h("dd", {}, v)))),
      job.message ? h("p", { class: "message" }, job.message) : null);
    latest.replaceChildren(...Object.entries(job.latest_metrics).map(([name, value]) =>
      h("span", { class: "metric" }, h("b", {}, name), " ", formatNumber(value))));
    logs.setRanks(job.plan.world_size || 0);
  };

  const refresh = async () => {
    const [fresh, eventPage, checkpointPage] = await Promise.all([
      api.get(`/v1/jobs/${jobId}`, signal),
      api.get(`/v1/jobs/${jobId}/events`, signal),
      api.get(`/v1/jobs/${jobId}/checkpoints`, signal),
    ]);
    render(fresh);
    events.replaceChildren(eventTable(eventPage.data));
    checkpoints.replaceChildren(checkpointTable(checkpointPage.data));
  };

  (async () => {
    await refresh().catch(showError);
    if (!job) return;
    followMetrics(jobId, plot, live, signal).catch(showError);
    const stopped = new AbortController();
    signal.addEventListener("abort", () => stopped.abort());
    // Once the job has ended, one more read picks up what its last moments wrote.
    every(POLL_MS, stopped.signal, async () => {
      const wasLive = live();
      await refresh();
      if (!wasLive) stopped.abort();
    });
  })();
}

function facts(job) {
  const plan = job.plan || {};
  return [
    ["attempt", String(job.attempt)],
    ["strategy", `${plan.strategy || "?"} · ${plan.world_size || "?"} processes on ${plan.device || "?"}`],
    ["host", job.host || "not placed yet"],
    ["GPUs", job.gpu_ids?.length ? job.gpu_ids.join(", ") : "none"],
    ["priority", String(job.priority)],
    ["submitted", formatTime(job.created_at)],
    ["running since", formatTime(job.running_at)],
    ["finished", formatTime(job.finished_at)],
    ["reason", job.status_reason || ""],
  ];
}

function eventTable(events) {
  return table(["at", "from", "to", "reason", "attempt"], events.map((e) => h("tr", {},
    h("td", {}, formatTime(e.at)),
    h("td", {}, e.from_status ? statusBadge(e.from_status) : ""),
    h("td", {}, statusBadge(e.to_status)),
    h("td", { title: e.message || "" }, e.reason || e.message || ""),
    h("td", { class: "num" }, String(e.attempt)))), "No transitions yet.");
}

function checkpointTable(checkpoints) {
  return table(["step", "epoch", "size", "saved", ""], checkpoints.map((c) => {
    const filename = `job${c.job_id}-step${c.step}.pt`;
    const link = h("a", { href: c.download_url, download: filename, onclick: (e) => {
      if (!api.token()) return;
      e.preventDefault();
      api.download(c.download_url, filename).catch(showError);
    } }, "download");
    return h("tr", {}, h("td", { class: "num" }, String(c.step)), h("td", { class: "num" }, String(c.epoch)),
      h("td", { class: "num" }, formatBytes(c.size_bytes)), h("td", {}, formatTime(c.created_at)), h("td", {}, link));
  }), "No checkpoints yet.");
}

/** A log viewer for the launcher or one rank; it reads on from the last offset until the log ends. */
function logPanel(jobId, signal) {
  const select = h("select", { onchange: () => restart() }, h("option", { value: "" }, "launcher"));
  const text = h("pre", { class: "log" });
  let reading = null;
  const restart = () => {
    reading?.abort();
    reading = new AbortController();
    signal.addEventListener("abort", () => reading.abort(), { once: true });
    text.textContent = "";
    follow(select.value, reading);
  };
  const follow = (rank, reader) => {
    let offset = 0;
    const query = rank === "" ? "" : `&rank=${rank}`;
    every(POLL_MS, reader.signal, async () => {
      const chunk = await api.get(`/v1/jobs/${jobId}/logs?offset=${offset}${query}`, reader.signal);
      offset = chunk.next_offset;
      const atBottom = text.scrollTop + text.clientHeight >= text.scrollHeight - 4;
      text.textContent = (text.textContent + chunk.text).slice(-LOG_TAIL_CHARS);
      if (atBottom) text.scrollTop = text.scrollHeight;
      if (chunk.eof) reader.abort();
    });
  };
  const setRanks = (n) => {
    for (let rank = select.options.length - 1; rank < n; rank++) select.append(h("option", { value: rank }, `rank ${rank}`));
  };
  restart();
  return { element: h("div", {}, h("label", {}, "show ", select), text), setRanks };
}
