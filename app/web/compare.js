"use strict";
// Several jobs side by side: any metric's curves, labelled by job name, and how their specs differ (worked
// out by the API's /v1/compare, as for `trainyard compare --diff`).

function compareView(root, signal, ids) {
  const input = h("input", { value: ids.join(","), placeholder: "job ids, e.g. 3,4,7", size: 24 });
  const form = h("form", { class: "toolbar", onsubmit: (e) => {
    e.preventDefault();
    location.hash = `#/compare?ids=${idsOf(input.value.replace(/\s+/g, ","))}`;
  } }, h("h2", {}, "Compare"), input, h("button", { type: "submit" }, "Show"));
  root.append(form);
  if (!ids.length) {
    root.append(h("p", { class: "empty" }, "Pick jobs on the Jobs page, or type their ids."));
    return;
  }
  const style = new ChartStyle();
  const metric = h("select", { onchange: () => show() }, h("option", { value: "loss" }, metricTitle("loss")));
  const holder = h("div", { class: "chart spaced" });
  const differences = h("div");
  root.append(h("div", { class: "toolbar" }, h("label", {}, "metric ", metric), style.controls()), holder, differences);

  let jobs = [];
  let chart = null;
  let drawing = null;
  const show = () => {
    drawing?.abort();
    drawing = new AbortController();
    signal.addEventListener("abort", () => drawing.abort(), { once: true });
    chart?.destroy();
    holder.replaceChildren();
    holder.dataset.metric = metric.value;
    chart = new StepChart(holder, metricTitle(metric.value), jobs.map((job) => `#${job.id} ${job.name}`), style);
    every(POLL_MS * 2.5, drawing.signal, async () => {
      const all = await Promise.all(jobs.map((job) => metricSeries(job.id, metric.value, drawing.signal)));
      all.forEach((series, i) => chart.replace(i, series));
    });
  };
  signal.addEventListener("abort", () => chart?.destroy());

  (async () => {
    jobs = await Promise.all(ids.map((id) => api.get(`/v1/jobs/${id}`, signal)));
    // Every metric any of them reported: the latest values name them all.
    const names = [...new Set(jobs.flatMap((job) => Object.keys(job.latest_metrics)))].sort();
    metric.append(...names.filter((n) => n !== "loss").map((n) => h("option", { value: n }, metricTitle(n))));
    show();
    const diff = await api.optional(`/v1/compare?${ids.map((id) => `job=${id}`).join("&")}`, signal);
    if (diff) differences.replaceChildren(diffCard(diff));
  })().catch(showError);
}

// A code bundle's id ("sha256:" and 64 hex digits) is a word no line breaks: three side by side pushed the
// third job off a 1280-pixel window. Its first 12 digits tell bundles apart.
const LONGEST_WORD = 24;
const CUT_TO = 19;

/** A value as its cell shows it: a long unbroken one cut, every one in full on hover. */
function diffValue(value) {
  const cut = value.length > LONGEST_WORD && !/\s/.test(value) ? `${value.slice(0, CUT_TO)}…` : value;
  return h("td", { class: "mono", title: value }, cut);
}

function diffCard(diff) {
  const rows = diff.differences.map((d) => h("tr", {}, h("td", { title: d.field }, d.label),
    ...d.values.map(diffValue)));
  return h("section", { class: "card", "data-diff": "" },
    h("h3", {}, "How they differ"),
    h("p", { class: "diff-summary" }, diff.summary),
    rows.length ? table(["", ...diff.jobs.map((j) => `#${j.id} ${j.name}`)], rows, "") : null);
}
