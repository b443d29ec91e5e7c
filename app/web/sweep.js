"use strict";
// Sweeps (docs/sweeps.md): the list, and one sweep's page: its status, best trial so far and trials by state,
// a table of its trials (sorted by any column; each trial links to its job), and the charts of sweepcharts.js.

const SWEEP_RUNNING = "running";
const TRIAL_STATES = ["running", "completed", "pruned", "failed"];

/** "2 running · 5 completed · 3 pruned": the states some trial is in. */
const countsText = (counts) => TRIAL_STATES.filter((s) => counts[s]).map((s) => `${counts[s]} ${s}`).join(" · ");
const objectiveText = (sweep) => `${sweep.objective.goal} ${sweep.objective.metric}`;
const searchText = (sweep) => `sampler ${sweep.sampler} · pruner ${sweep.pruner}`;
const endedText = (sweep) => {
  const { completed, pruned, failed } = sweep.trials;
  return `${completed + pruned + failed} / ${sweep.max_trials}`;
};

/** Each parameter's last part ("lr" for train.lr), or its whole path where two would read the same. */
function shortNames(paths) {
  const last = paths.map((p) => p.slice(p.lastIndexOf(".") + 1));
  return Object.fromEntries(paths.map((p, i) => [p, last.filter((n) => n === last[i]).length === 1 ? last[i] : p]));
}

const formatParam = (value) =>
  (typeof value === "number" && !Number.isInteger(value) ? formatNumber(value) : String(value));

function sweepsView(root, signal) {
  const body = h("div");
  root.append(h("div", { class: "toolbar" }, h("h2", {}, "Sweeps")), body);
  const row = (sweep) => h("tr", { "data-sweep": sweep.id },
    h("td", {}, sweepLink(sweep.id)),
    h("td", {}, sweepLink(sweep.id, sweep.name)),
    h("td", {}, statusBadge(sweep.status)),
    h("td", { class: "num" }, endedText(sweep)),
    h("td", {}, countsText(sweep.trials)),
    h("td", { class: "num" }, sweep.best ? formatNumber(sweep.best.value) : ""),
    h("td", {}, objectiveText(sweep)),
    h("td", {}, searchText(sweep)),
    h("td", { class: "nowrap" }, shortTime(sweep.created_at)));
  every(POLL_MS, signal, async () => {
    const page = await api.get("/v1/sweeps?limit=100", signal);
    body.replaceChildren(table(["id", "name", "status", "ended", "trials", "best", "objective", "search",
      "created"], page.data.map(row), "No sweeps yet: trainyard sweep submit SWEEP.json, or POST one to /v1/sweeps."));
  });
}

function sweepView(root, signal, sweepId) {
  let sweep = null;
  const header = h("section", { class: "card" });
  const trialsCard = h("section", { class: "card" });
  const charts = h("div");
  root.append(header, charts, trialsCard);
  let trials = null;
  let drawn = null;

  const cancel = h("button", { class: "danger", onclick: async () => {
    cancel.disabled = true;
    try {
      render(await api.post(`/v1/sweeps/${sweepId}/cancel`));
    } catch (error) {
      showError(error);
      cancel.disabled = false;
    }
  } }, "Cancel sweep");

  const render = (fresh) => {
    sweep = fresh;
    cancel.hidden = sweep.status !== SWEEP_RUNNING;
    header.replaceChildren(
      h("div", { class: "toolbar" }, h("h2", {}, `Sweep #${sweep.id} ${sweep.name}`), statusBadge(sweep.status), cancel),
      h("dl", { class: "facts" }, sweepFacts(sweep).filter(([, v]) => v).map(([k, v]) =>
        h("div", { "data-fact": k }, h("dt", {}, k), h("dd", {}, v)))));
  };

  const stopped = new AbortController();
  signal.addEventListener("abort", () => stopped.abort());
  // Once the sweep has ended, one more read picks up its last trials' ends.
  every(POLL_MS, stopped.signal, async () => {
    const wasRunning = !sweep || sweep.status === SWEEP_RUNNING;
    const [fresh, page] = await Promise.all([
      api.get(`/v1/sweeps/${sweepId}`, signal),
      api.get(`/v1/sweeps/${sweepId}/trials`, signal),
    ]);
    render(fresh);
    if (!trials) {
      trials = trialTable(fresh.config.parameters || {});
      trialsCard.replaceChildren(h("h3", {}, "Trials"), trials.element);
      drawn = sweepCharts(charts, fresh, signal);
    }
    trials.show(page.data, fresh.best?.trial);
    await drawn.update(fresh, page.data);
    if (!wasRunning) stopped.abort();
  });
}

function sweepFacts(sweep) {
  const { best } = sweep;
  const saved = sweep.steps_if_unpruned ? 1 - sweep.steps_used / sweep.steps_if_unpruned : 0;
  return [
    ["objective", objectiveText(sweep)],
    ["best so far", best
      ? h("span", {}, `${formatNumber(best.value)} · `, best.job_id ? jobLink(best.job_id, `trial ${best.trial}`)
        : `trial ${best.trial}`)
      : "no trial has completed yet"],
    ["trials ended", `${endedText(sweep)}, ${sweep.parallel} at a time`],
    ["by state", countsText(sweep.trials) || "none yet"],
    ["search", searchText(sweep)],
    ["steps", `${sweep.steps_used.toLocaleString()} of ${sweep.steps_if_unpruned.toLocaleString()} had none been pruned`
      + (saved > 0 ? ` (${Math.round(saved * 100)}% saved)` : "")],
    ["owner", sweep.owner],
    ["created", formatTime(sweep.created_at)],
    ["finished", formatTime(sweep.finished_at)],
  ];
}

/** A running trial's job may still be queued or starting: its job's state says more than Optuna's. */
const trialState = (trial) => (trial.state === "running" && trial.job_status ? trial.job_status : trial.state);

/** The trials, sorted by the column whose header was clicked last (again: the other way); blanks sort last.
 *  `space` is the sweep's parameters: a column each. */
function trialTable(space) {
  const paths = Object.keys(space);
  const names = shortNames(paths);
  const number = (key) => ({ key, cell: (t) => formatNumber(key(t)), num: true });
  const columns = [
    { label: "trial", key: (t) => t.number, num: true,
      cell: (t) => (t.job_id ? jobLink(t.job_id, String(t.number)) : String(t.number)) },
    { label: "job", key: (t) => t.job_id, cell: (t) => (t.job_id ? jobLink(t.job_id) : "") },
    { label: "state", key: trialState, cell: (t) => statusBadge(trialState(t)) },
    ...paths.map((p) => ({ label: names[p], title: p, key: (t) => t.params[p],
      cell: (t) => formatParam(t.params[p]), num: space[p].type !== "categorical" })),
    { label: "latest", ...number((t) => t.latest) },
    { label: "best", ...number((t) => t.best) },
    { label: "steps", key: (t) => t.steps, num: true,
      cell: (t) => (t.total_steps ? `${t.steps ?? 0} / ${t.total_steps}` : "") },
    { label: "note", key: (t) => t.message,
      cell: (t) => h("span", { class: "row-note", title: t.message || "" }, t.message || "") },
  ];
  let by = columns[0];
  let descending = false;
  let shown = [];
  let bestTrial = null;
  const element = h("div");
  const order = (a, b) => {
    const [x, y] = [by.key(a), by.key(b)];
    const blank = (x === null || x === undefined) - (y === null || y === undefined);
    if (blank) return blank;
    const cmp = x < y ? -1 : x > y ? 1 : 0;
    return descending ? -cmp : cmp;
  };
  const draw = () => {
    const header = columns.map((column) => {
      const sort = () => {
        descending = by === column ? !descending : false;
        by = column;
        draw();
      };
      const th = h("th", { class: column.num ? "sortable num" : "sortable",
        title: column.title || `sort by ${column.label}`, onclick: sort }, column.label);
      if (by === column) th.dataset.sort = descending ? "descending" : "ascending";
      return th;
    });
    const rows = [...shown].sort(order).map((t) =>
      h("tr", { "data-trial": t.number, class: t.number === bestTrial ? "best" : "" },
        columns.map((c) => h("td", { class: c.num ? "num" : "" }, c.cell(t)))));
    element.replaceChildren(rows.length
      ? h("div", { class: "table-wrap" },
        h("table", { class: "trials" }, h("thead", {}, h("tr", {}, header)), h("tbody", {}, rows)))
      : h("p", { class: "empty" }, "No trials yet."));
  };
  return {
    element,
    show(trials, best) {
      shown = trials;
      bestTrial = best ?? null;
      draw();
    },
  };
}
