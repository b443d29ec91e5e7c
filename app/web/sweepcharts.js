"use strict";
// A sweep's charts: the best objective so far over its trials, every trial's objective curve over steps, and
// parallel coordinates of the parameters against the objective (one polyline per trial). A trial is drawn in
// its look's colour in every chart, and the page's legend (lookLegend) shows the same colours.

// PALETTE[0] is the best-so-far line's colour too; no two looks share a colour.
const LOOKS = {
  best: { colour: PALETTE[0], width: 3, said: "best" },
  completed: { colour: PALETTE[2], width: 1.5, said: "completed" },
  running: { colour: PALETTE[3], width: 1.5, said: "running" },
  pruned: { colour: "#6b7280", width: 1.5, dash: [6, 4], said: "pruned (dashed, a dot where it stopped)" },
  failed: { colour: PALETTE[1], width: 1.5, said: "failed" },
};
// Past this many trials a legend would outgrow its chart; each curve's trial shows in the table instead.
const MAX_LEGEND = 12;
const SVG_NS = "http://www.w3.org/2000/svg";
// Trial numbers are whole: the x axis is marked at whole steps only.
const WHOLE_STEPS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000];
// The parallel coordinates' drawing box (the SVG scales to its holder's width).
const PC = { width: 960, height: 330, top: 50, bottom: 290, side: 80 };

/** svg("line", {x1: 0}, child): an SVG element; null children are skipped. */
function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value !== null && value !== undefined) el.setAttribute(key, value);
  }
  el.append(...children.flat().filter((c) => c !== null && c !== undefined));
  return el;
}

/** How a trial is drawn: its state, or "best" for the best completed one. */
const lookOf = (trial, best) => (trial.number === best ? "best" : trial.state);
/** A state the page does not know yet is drawn as running, not left without a colour. */
const lookStyle = (look) => LOOKS[look] ?? LOOKS.running;

/** The looks' colours, named: the one legend of the sweep's charts. */
function lookLegend() {
  return h("ul", { class: "looks" }, Object.entries(LOOKS).map(([look, { colour, dash, said }]) => {
    const swatch = h("span", { class: dash ? "swatch dashed" : "swatch" });
    swatch.style.borderColor = colour;
    return h("li", { "data-look": look }, swatch, said);
  }));
}

/** The index of a series' last point: where a pruned trial stopped. */
function lastPoint(values) {
  for (let i = values.length - 1; i >= 0; i--) if (values[i] !== null) return [i];
  return null;
}
/** A trial's place on the objective axis: a completed or pruned trial's value, else its latest report. */
const objectiveOf = (trial) => trial.value ?? trial.latest;

/** The best objective so far at each ended trial (by trial number, as Optuna plots a study's history). */
class TrialChart extends StepChart {
  options() {
    const options = super.options();
    options.axes[0].label = "trial";
    options.axes[0].incrs = WHOLE_STEPS;
    options.series[0].label = "trial";
    // It changes only when a trial beats it: a staircase, with each completed trial's own value as a dot.
    options.series[1].paths = uPlot.paths.stepped({ align: 1 });
    const completed = LOOKS.completed.colour;
    Object.assign(options.series[2], { stroke: completed, paths: () => null,
      points: { show: true, size: 6, stroke: completed, fill: completed } });
    return options;
  }

  show(trials, goal) {
    const better = goal === "maximize" ? Math.max : Math.min;
    const best = new Map();
    const values = new Map();
    let current = null;
    for (const trial of trials.filter((t) => t.state !== "running")) {
      if (trial.state === "completed" && trial.value !== null) {
        values.set(trial.number, trial.value);
        current = current === null ? trial.value : better(current, trial.value);
      }
      if (current !== null) best.set(trial.number, current);
    }
    this.replace(0, best);
    this.replace(1, values);
  }
}

/** One series per trial over steps, in its look's colour; a pruned trial's dashed line ends in a dot. */
class TrialCurves extends StepChart {
  options() {
    const options = super.options();
    options.legend.show = this.labels.length <= MAX_LEGEND;
    options.series.slice(1).forEach((series, i) => {
      const look = this.looks?.[i] ?? "running";
      const { colour, width, dash } = lookStyle(look);
      Object.assign(series, { label: `${series.label} (${look})`, stroke: colour, width,
        points: { ...series.points, stroke: colour, fill: colour } });
      if (dash) series.dash = dash;
      if (look === "pruned") series.points.filter = (plot, index) => lastPoint(plot.data[index]);
    });
    return options;
  }

  /** A trial more, or one whose look changed, redraws the chart; trial n is series n. */
  setTrials(trials, best) {
    const looks = trials.map((t) => lookOf(t, best));
    if (this.looks && looks.length === this.looks.length && looks.every((look, i) => look === this.looks[i])) return;
    for (const trial of trials.slice(this.labels.length)) {
      this.labels.push(`trial ${trial.number}`);
      this.series.push(new Map());
    }
    this.looks = looks;
    this.rebuild();
  }
}

function sweepCharts(holder, sweep, signal) {
  const metric = sweep.objective.metric;
  const curvesStyle = new ChartStyle();
  const grid = h("div", { class: "charts" });
  const bestEl = h("div", { class: "chart", "data-metric": "best-so-far" });
  const curvesEl = h("div", { class: "chart", "data-metric": "curves" });
  const parallel = parallelCoordinates(sweep);
  holder.append(lookLegend(), grid, parallel.element);
  // The log scale and smoothing are the curves' own: a smoothed best-so-far would no longer be the best.
  grid.append(bestEl, h("div", {}, curvesStyle.controls(), curvesEl));
  const best = new TrialChart(bestEl, `best ${metric} so far (${sweep.objective.goal})`, ["best so far", "trial's value"],
    new ChartStyle());
  const curves = new TrialCurves(curvesEl, `${metric} of each trial`, [], curvesStyle);
  signal.addEventListener("abort", () => { best.destroy(); curves.destroy(); });
  // Trials whose whole curve is drawn: read after they ended, they get no more points.
  const whole = new Set();

  return {
    async update(fresh, trials) {
      best.show(trials, fresh.objective.goal);
      curves.setTrials(trials, fresh.best?.trial);
      parallel.draw(trials, fresh.best?.trial);
      const reading = trials.filter((t) => t.job_id && !whole.has(t.number) && t.job_status !== "queued");
      const series = await Promise.all(reading.map((t) => metricSeries(t.job_id, metric, signal)));
      reading.forEach((trial, i) => {
        curves.replace(trial.number, series[i]);
        if (trial.state !== "running") whole.add(trial.number);
      });
    },
  };
}

/** An axis: `fraction(value)` is its height from the bottom (0) to the top (1), null if it cannot show it. */
function numericAxis(label, title, low, high, log) {
  const f = log ? Math.log10 : (x) => x;
  const [from, to] = [f(low), f(high)];
  const fraction = (v) => (typeof v !== "number" || (log && v <= 0) ? null
    : to === from ? 0.5 : Math.min(Math.max((f(v) - from) / (to - from), 0), 1));
  // A log axis is marked at every power of ten between its ends.
  const inner = [];
  for (let e = Math.floor(from) + 1; log && e < to; e++) inner.push(10 ** e);
  const ticks = (log ? [low, ...inner, high] : [low, (low + high) / 2, high])
    .map((v) => [fraction(v), String(Number(v.toPrecision(3)))]);
  return { label: log ? `${label} (log)` : label, title, fraction, ticks };
}

function parameterAxis(path, param, name) {
  if (param.type !== "categorical") return numericAxis(name, path, param.low, param.high, param.log);
  const keys = param.choices.map((c) => JSON.stringify(c));
  const at = (i) => (keys.length === 1 ? 0.5 : i / (keys.length - 1));
  return {
    label: name,
    title: path,
    fraction: (v) => (keys.includes(JSON.stringify(v)) ? at(keys.indexOf(JSON.stringify(v))) : null),
    ticks: param.choices.map((c, i) => [at(i), String(c)]),
  };
}

function objectiveAxis(sweep, trials) {
  const values = trials.map(objectiveOf).filter((v) => typeof v === "number");
  const [low, high] = values.length ? [Math.min(...values), Math.max(...values)] : [0, 1];
  const { metric, goal } = sweep.objective;
  return numericAxis(`${metric} (${goal === "minimize" ? "min" : "max"})`, metric, low, high, false);
}

/** The parameters and the objective on vertical axes, a polyline per trial through its values; a click on one
 *  opens its trial's job. */
function parallelCoordinates(sweep) {
  const space = sweep.config.parameters || {};
  const paths = Object.keys(space);
  const names = shortNames(paths);
  const element = h("div", { class: "chart parallel", "data-metric": "parallel" });
  const sign = sweep.objective.goal === "maximize" ? -1 : 1;

  const draw = (trials, bestTrial) => {
    const axes = [...paths.map((p) => parameterAxis(p, space[p], names[p])), objectiveAxis(sweep, trials)];
    const step = axes.length > 1 ? (PC.width - 2 * PC.side) / (axes.length - 1) : 0;
    const x = (i) => (axes.length > 1 ? PC.side + i * step : PC.width / 2);
    const y = (fraction) => PC.bottom - fraction * (PC.bottom - PC.top);
    const completed = trials.filter((t) => t.state === "completed" && t.value !== null)
      .sort((a, b) => sign * (a.value - b.value));
    const rank = new Map(completed.map((t, i) => [t.number, completed.length > 1 ? i / (completed.length - 1) : 0]));

    const axisEls = axes.map((axis, i) => svg("g", { class: "pc-axis" },
      svg("line", { x1: x(i), x2: x(i), y1: PC.top, y2: PC.bottom }),
      svg("text", { x: x(i), y: PC.top - 22, "text-anchor": "middle", class: "pc-label" }, svg("title", {}, axis.title),
        axis.label),
      // The last axis (the objective) is marked on its right, clear of the lines that end on it.
      axis.ticks.filter(([f]) => f !== null).map(([f, text]) => (i === axes.length - 1 && i > 0
        ? svg("text", { x: x(i) + 6, y: y(f) + 4, "text-anchor": "start" }, text)
        : svg("text", { x: x(i) - 6, y: y(f) + 4, "text-anchor": "end" }, text)))));
    const line = (trial) => {
      const values = [...paths.map((p) => trial.params[p]), objectiveOf(trial)];
      const points = values.map((v, i) => [i, axes[i].fraction(v)]).filter(([, f]) => f !== null)
        .map(([i, f]) => `${x(i).toFixed(1)},${y(f).toFixed(1)}`);
      const look = lookOf(trial, bestTrial);
      const { colour, width, dash } = lookStyle(look);
      // Completed trials fade from the best to the worst: the colour says the state, the strength the rank.
      const strength = look === "completed" ? 1 - 0.65 * (rank.get(trial.number) ?? 1) : 1;
      const said = paths.map((p) => `${names[p]} ${formatParam(trial.params[p])}`).join(" · ");
      const el = svg("polyline", { points: points.join(" "), stroke: colour, "stroke-opacity": strength,
        "stroke-width": width + 0.5, "stroke-dasharray": dash?.join(" "), class: `pc-trial pc-${look}`,
        "data-trial": trial.number },
      svg("title", {}, `trial ${trial.number} (${trial.state}): ${said} → ${formatNumber(objectiveOf(trial))}`));
      if (trial.job_id) el.addEventListener("click", () => { location.hash = `#/jobs/${trial.job_id}`; });
      return el;
    };
    // The faded first and the best last, so that the best trials are drawn on top (and the axes over all).
    const order = (t) => (t.state === "completed" ? 2 - (rank.get(t.number) ?? 1) : t.state === "running" ? 1 : 0);
    const lines = [...trials].sort((a, b) => order(a) - order(b)).map(line);
    element.replaceChildren(
      h("h4", {}, "Parameters against the objective"),
      svg("svg", { viewBox: `0 0 ${PC.width} ${PC.height}`, role: "img", "aria-label": "parallel coordinates" },
        lines, axisEls),
      h("p", { class: "row-note" }, "Completed trials fade from the best to the worst. Click a line for its " +
        "trial's job."));
  };
  return { element, draw };
}
