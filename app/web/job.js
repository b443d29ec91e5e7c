"use strict";
// One job: status and progress, live curves, what it ran (spec and plan), its forecast, its start-up, its
// profile, logs per rank, state events, checkpoints, and Cancel while it can still be cancelled.

const LOG_TAIL_CHARS = 200_000;

function jobView(root, signal, jobId) {
  let job = null;
  const live = () => !job || !TERMINAL.has(job.status);
  const header = h("section", { class: "card" });
  const latest = h("div", { class: "latest" });
  const curves = h("div");
  const record = h("div", { class: "columns" });
  const startup = h("div");
  const forecast = h("div");
  const tools = h("div");
  const events = h("div");
  const checkpoints = h("div");
  const logs = logPanel(jobId, signal);
  const stacks = stacksCard(jobId, signal);
  root.append(header, latest, curves, record, forecast, startup, tools,
    h("section", { class: "card" }, h("h3", {}, "Logs"), logs.element), stacks.element,
    h("div", { class: "columns" },
      h("section", { class: "card" }, h("h3", {}, "State events"), events),
      h("section", { class: "card" }, h("h3", {}, "Checkpoints"), checkpoints)));
  const charts = jobCharts(curves, signal);

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
    // A stall's capture comes as the job ends: read again when its status changes.
    if (fresh.status !== job?.status) stacks.show();
    job = fresh;
    stacks.setLive(live());
    // A finished job has nothing to cancel; a cancelling one is on its way.
    cancel.hidden = !live();
    cancel.disabled = job.status === "cancelling";
    header.replaceChildren(
      h("div", { class: "toolbar" }, h("h2", {}, `#${job.id} ${job.name}`), statusBadge(job.status), cancel),
      progressBar(job.progress),
      h("dl", { class: "facts" }, facts(job).filter(([, v]) => v).map(([k, v]) => h("div", {}, h("dt", {}, k), h("dd", {}, v)))),
      // replaceChildren writes a null as the text "null": a job without a message adds nothing.
      ...(job.message ? [h("p", { class: `message ${TERMINAL.has(job.status) && job.status !== "succeeded" ? "ended-badly" : ""}` },
        job.message)] : []));
    latest.replaceChildren(...Object.entries(job.latest_metrics).map(([name, value]) =>
      h("span", { class: "metric" }, h("b", {}, name), " ", formatNumber(value))));
    logs.setRanks(job.plan.world_size || 0);
    // Its marks arrive while the job starts, and a restart begins a new record.
    startup.replaceChildren(...(job.timings ? [startupCard(job.timings)] : []));
    // Its measured figures arrive with the job's metrics.
    forecast.replaceChildren(forecastCard(job.plan));
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
    // Everything below needs the job: a first read that fails (a busy database answers 503) is tried again,
    // or the page would stay without curves for good; a job that is not there is not waited for.
    while (!job && !signal.aborted) {
      const missing = await refresh().then(() => false, (error) => {
        showError(error);
        return error.status === 404;
      });
      if (missing) return;
      if (!job) await sleep(POLL_MS, signal);
    }
    if (!job) return;
    record.replaceChildren(specCard(job.spec), planCard(job.plan));
    const profile = toolsCard(job, signal);
    if (profile) tools.replaceChildren(profile.element);
    charts.joinAncestors(job).catch(showError);
    followMetrics(jobId, charts.plot, live, signal).catch(showError);
    const stopped = new AbortController();
    signal.addEventListener("abort", () => stopped.abort());
    let profiled = false;
    // Once the job has ended, one more read picks up what its last moments wrote.
    every(POLL_MS, stopped.signal, async () => {
      const wasLive = live();
      await refresh();
      profiled = profiled || !profile || (await profile.load());
      if (!wasLive) stopped.abort();
    });
  })();
}

function facts(job) {
  const plan = job.plan || {};
  const run = runSeconds(job);
  return [
    ["owner", job.owner],
    // An admin's retry of a user's job is the user's; who asked for it is said beside.
    ["requested by", job.owner && job.requested_by !== job.owner ? job.requested_by : ""],
    ["attempt", String(job.attempt)],
    ["strategy", `${plan.strategy || "?"} · ${devicesText(job)}`],
    ["precision", plan.precision],
    ["host", job.host || "not placed yet"],
    ["Slurm job", job.slurm_job_id != null ? String(job.slurm_job_id) : ""],
    ["made from", job.parent_id ? h("span", {}, "job ", jobLink(job.parent_id)) : ""],
    ["depends on", jobLinks(job.spec.depends_on)],
    ["sweep", job.sweep_id != null ? sweepLink(job.sweep_id, `trial ${job.trial} of sweep ${job.sweep_id}`) : ""],
    ["priority", String(job.priority)],
    ["submitted", formatTime(job.created_at)],
    ["running since", formatTime(job.running_at)],
    ["finished", formatTime(job.finished_at)],
    ["ran for", run === null ? "" : formatDuration(run)],
    ["reason", job.status_reason || ""],
  ];
}

/** Links to the jobs of a spec's depends_on, "" for none: each must succeed before this job may start. */
function jobLinks(ids) {
  if (!ids?.length) return "";
  return h("span", {}, ...ids.flatMap((id, i) => (i ? [", ", jobLink(id)] : [jobLink(id)])));
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
  return table(["step", "epoch", "size", "saved", ""], checkpoints.map((c) => h("tr", {},
    h("td", { class: "num" }, String(c.step)), h("td", { class: "num" }, String(c.epoch)),
    h("td", { class: "num" }, formatBytes(c.size_bytes)), h("td", {}, formatTime(c.created_at)),
    h("td", {}, downloadLink(c.download_url, `job${c.job_id}-step${c.step}.pt`, "download")))), "No checkpoints yet.");
}

/** A log viewer for one rank (rank 0 first: where training prints its steps) or the launcher; it reads on
 *  from the last offset until the log ends. */
function logPanel(jobId, signal) {
  const launcher = h("option", { value: "" }, "launcher");
  const select = h("select", { onchange: () => restart() }, h("option", { value: "0" }, "rank 0"), launcher);
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
    for (let rank = select.options.length - 1; rank < n; rank++) {
      select.insertBefore(h("option", { value: rank }, `rank ${rank}`), launcher);
    }
  };
  restart();
  return { element: h("div", {}, h("label", {}, "show ", select), text), setRanks };
}
