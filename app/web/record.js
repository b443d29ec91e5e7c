"use strict";
// What a job was: its spec and the plan it resolved to, readable and as JSON, its start-up's phases, and what
// its trainer wrote for inspection tools (the profile, TensorBoard's events).

/** {a: {b: 1}} -> [["a.b", 1]]; a list is one value. */
function leaves(value, prefix = "") {
  if (value === null || typeof value !== "object" || Array.isArray(value)) return [[prefix, value]];
  return Object.entries(value).flatMap(([key, item]) => leaves(item, prefix ? `${prefix}.${key}` : key));
}

const shownValue = (v) => (v === null || v === undefined ? "-" : typeof v === "object" ? JSON.stringify(v) : String(v));
const keywords = (kwargs) => Object.entries(kwargs || {}).map(([k, v]) => `${k} ${shownValue(v)}`).join(", ");
/** The parts that are set, as one line: "sgd · lr 0.1 · momentum 0.9". */
const joined = (...parts) => parts.filter(Boolean).join(" · ");

function factList(rows) {
  return h("dl", { class: "record" }, rows.filter(([, v]) => v)
    .map(([k, v]) => h("div", {}, h("dt", {}, k), h("dd", {}, v))));
}

function allFields(value) {
  const rows = leaves(value).map(([k, v]) => h("tr", {}, h("td", {}, k), h("td", { class: "mono" }, shownValue(v))));
  return h("details", {}, h("summary", {}, `every field (${rows.length})`), table(["field", "value"], rows, ""));
}

function card(title, value, ...body) {
  return h("section", { class: "card", "data-record": title.toLowerCase() },
    h("div", { class: "toolbar" }, h("h3", {}, title), copyButton("Copy as JSON", () => JSON.stringify(value, null, 2))),
    ...body);
}

function specCard(spec) {
  // The spec as the user submitted it: a field left to its default is not there (the plan card shows what
  // it resolved to), so each fact shows only what was written.
  const { model, data, program } = spec;
  const train = spec.train ?? {};
  const length = train.max_steps ? plural(train.max_steps, "step") : train.epochs && plural(train.epochs, "epoch");
  return card("Spec", spec, factList([
    // A program job runs the user's own script, which builds its model and data and picks its batches.
    ["program", program && program.entrypoint.join(" ")],
    ["hyperparameters", program && keywords(program.hyperparameters)],
    // Their kwargs are a built-in model's sizes, or the hyperparameters of user code.
    ["model", model && joined(model.arch || model.factory, keywords(model.kwargs))],
    ["data", data && joined(data.dataset || data.factory, data.root, data.image_size && `${data.image_size} px`, keywords(data.kwargs))],
    ["batch", !program && joined(train.batch_size && `${train.batch_size} global`, train.grad_accum_steps > 1 && `${train.grad_accum_steps} accumulation steps`)],
    ["length", length],
    ["optimizer", joined(train.optimizer, train.lr !== undefined && `lr ${train.lr}`, train.optimizer === "sgd" && train.momentum !== undefined && `momentum ${train.momentum}`,
      train.weight_decay && `weight decay ${train.weight_decay}`)],
    ["schedule", joined(train.schedule, train.warmup_steps && `warm-up ${plural(train.warmup_steps, "step")}`,
      train.lr_scaling && train.lr_scaling !== "none" && `${train.lr_scaling} lr scaling`)],
    ["precision", spec.precision],
    ["seed", train.seed !== undefined && String(train.seed)],
    // A job of a pipeline goes on from the checkpoint the job before it left (read when it starts).
    ["resumes from", spec.checkpoint?.resume_from_job && h("span", {}, "job ", jobLink(spec.checkpoint.resume_from_job), "'s latest checkpoint")],
    ["code", spec.code],
  ]), allFields(spec));
}

function planCard(plan) {
  const hosts = plan.nnodes > 1 ? `, over ${plural(plan.nnodes, "host")}` : "";
  return card("Plan", plan, factList([
    ["strategy", `${plan.strategy}: ${plan.strategy_reason}`],
    ["processes", `${plural(plan.world_size, "process", "processes")} on ${plan.device} (${plan.backend})${hosts}`],
    ["batch per rank", `${plan.per_rank_batch}${plan.micro_batch !== plan.per_rank_batch ? `, micro-batches of ${plan.micro_batch}` : ""}`],
    ["stages", plan.stages > 1 ? `${plan.stages}${plan.microbatches > 1 ? `, ${plan.microbatches} micro-batches` : ""}` : null],
    ["precision", plan.precision],
    ["lr", String(plan.lr)],
    ["GPUs", plan.gpus?.length ? plan.gpus.join(", ") : null],
    ["resumes from", plan.resume_path],
  ]), plan.argv?.length ? h("pre", { class: "argv" }, plan.argv.join(" ")) : null, allFields(plan));
}

/** The plan's forecast of peak memory and step time beside what the job measured (filled in by the API from
 *  its latest metrics), or why it has none. A ratio is forecast / measured: above 1, the forecast was high. */
function forecastCard(plan) {
  const f = plan.forecast;
  if (!f) return card("Forecast", null, h("p", { class: "empty" }, `no forecast: ${plan.forecast_note || "none was made at submit"}`));
  const gib = (bytes) => `${(bytes / 2 ** 30).toFixed(1)} GiB`;
  const seconds = (s) => `${formatNumber(s)} s`;
  const against = (measured, forecast, shown) => measured == null ? null : `${shown(measured)} (forecast ${(forecast / measured).toFixed(2)}×)`;
  return card("Forecast", f, factList([
    ["peak memory", `${gib(f.peak_memory_bytes)}${f.device_memory_bytes ? ` of ${gib(f.device_memory_bytes)}` : ""}`],
    ["fits", f.fits ? "yes" : "no"],
    ["measured peak", against(f.measured_peak_memory_bytes, f.peak_memory_bytes, gib)],
    ["step time", seconds(f.step_time_s)],
    ["measured step", against(f.measured_step_time_s, f.step_time_s, seconds)],
    ["job time", f.job_time_s == null ? null : formatDuration(f.job_time_s)],
    ["basis", f.basis],
  ]));
}

/** Where the current attempt's start-up went, phase by phase: the job's timings. */
function startupCard(timings) {
  const seconds = (value) => (value === null ? null : `${value.toFixed(2)} s`);
  return card("Start-up", timings, factList([
    ...timings.phases.map((p) => [p.phase.replaceAll("_", " "), seconds(p.seconds)]),
    ["to first step", seconds(timings.to_first_step_s)],
    ["attempt", String(timings.attempt)],
  ]));
}

/** The profile's summary and trace, and TensorBoard's events, for a job that asked for them. */
function toolsCard(job, signal) {
  const { profile, metrics } = job.spec;
  if (!profile?.steps && !metrics?.tensorboard) return null;
  const summary = h("div", {}, h("p", { class: "empty" }, "Looking for the profile…"));
  const body = h("section", { class: "card", "data-record": "tools" }, h("h3", {}, "Profile and TensorBoard"),
    profile?.steps ? summary : null,
    metrics?.tensorboard ? h("p", {}, downloadLink(`/v1/jobs/${job.id}/tensorboard`, `job${job.id}-tensorboard.tar`,
      "TensorBoard event files (.tar)"), " — unpack, then tensorboard --logdir .") : null);
  const load = async () => {
    try {
      summary.replaceChildren(profileSummary(job.id, await api.get(`/v1/jobs/${job.id}/profile`, signal)));
      return true;
    } catch (error) {
      // 404 says why: not profiled, or when the profile will be written.
      summary.replaceChildren(h("p", { class: "empty" }, error.detail || String(error)));
      return false;
    }
  };
  return { element: body, load: profile?.steps ? load : async () => true };
}

function profileSummary(jobId, p) {
  const ms = (us) => `${(us / 1000).toFixed(2)} ms`;
  const onGpu = p.device !== "cpu";
  const ops = (title, list) => h("div", {}, h("h4", {}, title), table(["op", "calls", "self time"],
    list.slice(0, 5).map((op) => h("tr", {}, h("td", { class: "mono" }, op.name), h("td", { class: "num" }, String(op.calls)),
      h("td", { class: "num nowrap" }, ms(op.self_us)))), "none"));
  return h("div", {},
    factList([
      ["profiled", `${plural(p.steps, "step")} from step ${p.first_step} on ${p.device}`],
      ["step wall time", ms(p.step_wall_us)],
      ["CPU time", ms(p.cpu_total_us)],
      ["GPU time", onGpu ? `${ms(p.gpu_total_us)}, ${(p.memcpy_share_of_gpu * 100).toFixed(1)}% of it copies` : null],
      ["host waits", onGpu ? `${(p.sync_share_of_cpu * 100).toFixed(1)}% of CPU time` : null],
      ["trace", downloadLink(`/v1/jobs/${jobId}/profile/trace`, `job${jobId}-trace.json`, "Chrome trace (Perfetto)")],
    ]),
    h("div", { class: "columns" }, ops("top CPU ops", p.top_cpu_ops), onGpu ? ops("top GPU ops", p.top_gpu_ops) : null));
}

/** Every rank's Python stacks: the job's latest capture (taken when it stalled, or asked for here). */
function stacksCard(jobId, signal) {
  const text = h("pre", { class: "stacks" }, "No stacks captured yet.");
  const show = async () => {
    try {
      const s = await api.get(`/v1/jobs/${jobId}/stacks`, signal);
      const missing = s.collectives.map((c) =>
        `process group ${c.pg}: ranks ${c.missing} missing from ${c.collective} #${c.seq}, where ranks ${c.waiting} wait`);
      text.textContent = [`captured ${new Date(s.captured_at).toLocaleString()} (${s.reason})`, s.message, ...missing,
        ...s.ranks.map((r) => `rank ${r.rank} on ${r.host}\n${r.stack}`)].filter(Boolean).join("\n\n");
    } catch (error) {
      // 404 says why: none taken yet, and how to take one.
      text.textContent = error.detail || String(error);
    }
  };
  const capture = h("button", { onclick: async () => {
    capture.disabled = true;
    try {
      await api.post(`/v1/jobs/${jobId}/stacks`);
      await sleep(POLL_MS, signal);  // the worker looks at a running job every half second
      await show();
    } catch (error) {
      showError(error);
    }
    capture.disabled = false;
  } }, "Capture now");
  const element = h("section", { class: "card", "data-record": "stacks" },
    h("div", { class: "toolbar" }, h("h3", {}, "Stacks"), capture), text);
  return { element, show, setLive: (live) => { capture.hidden = !live; } };
}
