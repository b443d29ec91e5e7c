"use strict";
// The job page's curves: loss, accuracy and learning rate from the start, then a chart for every other metric
// the job reports (throughput, step time, memory, epoch time, and whatever else comes), and the loss of the
// jobs it went on from, joined before its own.

// Chart title -> the metric names it overlays, and whether it waits, hidden, for its first point. Every job
// reports a loss and a learning rate, but only some an eval_accuracy (a built-in classifier, or a program that
// names it so; one reporting eval_acc gets a chart of that name): empty, it would say "no data yet" for ever.
const JOB_CHARTS = [
  ["loss", ["loss", "eval_loss"], false],
  ["eval accuracy", ["eval_accuracy"], true],
  ["learning rate", ["lr"], false],
];
const MAX_ANCESTORS = 20;

function jobCharts(holder, signal) {
  const style = new ChartStyle();
  const grid = h("div", { class: "charts" });
  holder.append(style.controls(), grid);
  const byMetric = new Map();
  const chart = (title, names, waits = false) => {
    const el = h("div", { class: "chart", "data-metric": names[0], hidden: waits });
    grid.append(el);
    const made = new StepChart(el, title, [...names], style);
    signal.addEventListener("abort", () => made.destroy());
    names.forEach((name, i) => byMetric.set(name, [made, i]));
    return made;
  };
  JOB_CHARTS.forEach(([title, names, waits]) => chart(title, names, waits));
  // A family of series, such as the worker's GPU telemetry ("gpu_util/0", "gpu_util/1"), shares one chart.
  const families = new Map();
  const place = (name) => {
    const family = name.includes("/") ? name.slice(0, name.indexOf("/")) : null;
    const shared = family && families.get(family);
    if (shared) byMetric.set(name, [shared, shared.addSeries(name)]);
    else if (family) families.set(family, chart(metricTitle(family), [name]));
    else chart(metricTitle(name), [name]);
    return byMetric.get(name);
  };
  return {
    plot(rows) {
      for (const name of new Set(rows.map((r) => r.name))) {
        const [target, index] = byMetric.get(name) || place(name);
        target.add(index, rows.filter((r) => r.name === name).map((r) => [r.step, r.value]));
        target.el.hidden = false;
      }
    },
    /** The loss of the jobs `job` went on from, each up to the step the next one resumed at. */
    async joinAncestors(job) {
      const chain = await ancestors(job, signal);
      if (!chain.length) return;
      const [loss] = byMetric.get("loss");
      const index = loss.addSeries(`loss before #${job.id}: ${chain.map((a) => `#${a.id}`).join(", ")}`);
      const points = new Map();
      for (const [i, ancestor] of chain.entries()) {
        // Each covers the steps after the one its own parent was left at, up to where its child went on.
        const from = chain[i + 1]?.upTo ?? -Infinity;
        const series = await metricSeries(ancestor.id, "loss", signal);
        series.forEach((value, step) => { if (step > from && step <= ancestor.upTo) points.set(step, value); });
      }
      loss.replace(index, points);
    },
  };
}

/** The jobs `job` continues, newest first: each retry or resume that started from a checkpoint of its parent,
 *  with the step of that checkpoint. A job that started over ends the chain: its parent's past is not its own. */
async function ancestors(job, signal) {
  const chain = [];
  for (let child = job; child.parent_id && chain.length < MAX_ANCESTORS;) {
    const from = child.spec.checkpoint?.resume_from;
    // A parent deleted meanwhile, or one its checkpoint no longer lists, ends it too.
    const checkpoints = from ? await api.optional(`/v1/jobs/${child.parent_id}/checkpoints`, signal) : null;
    const resumed = checkpoints?.data.find((c) => c.id === from);
    if (!resumed) break;
    chain.push({ id: child.parent_id, upTo: resumed.step });
    child = await api.get(`/v1/jobs/${child.parent_id}`, signal);
  }
  return chain;
}
