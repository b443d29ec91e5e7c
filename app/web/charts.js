"use strict";
// Line charts over training steps, drawn by the vendored uPlot, with the page's log scale and smoothing.

const PALETTE = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#be185d", "#4d7c0f"];
const CHART_HEIGHT = 220;
const METRIC_TITLES = {
  samples_per_s: "throughput (samples/s)",
  step_time_s: "step time (s)",
  peak_mem_mb: "peak memory (MB)",
  epoch_time_s: "epoch time (s)",
  gpu_util: "GPU utilisation (%)",
  gpu_mem_mb: "GPU memory used (MB)",
  gpu_power_w: "GPU power (W)",
  gpu_temp_c: "GPU temperature (°C)",
  gpu_sm_mhz: "GPU SM clock (MHz)",
};
const metricTitle = (name) => METRIC_TITLES[name] || name;

/** uPlot wants one shared x array; series reported at different steps get nulls where they have no point. */
function alignSeries(series) {
  const steps = [...new Set(series.flatMap((s) => [...s.keys()]))].sort((a, b) => a - b);
  return [steps, ...series.map((s) => steps.map((step) => (s.has(step) ? s.get(step) : null)))];
}

/** TensorBoard's smoothing: an exponential moving average, debiased so that the first points are not pulled
 *  towards zero. Gaps stay gaps. */
function smooth(values, weight) {
  if (!weight) return values;
  let average = 0;
  let count = 0;
  return values.map((value) => {
    if (value === null) return null;
    average = average * weight + (1 - weight) * value;
    count += 1;
    return average / (1 - weight ** count);
  });
}

/** How every chart of a page is drawn; the controls change it and each chart follows. */
class ChartStyle {
  constructor() {
    this.log = false;
    this.smoothing = 0;
    this.charts = new Set();
  }

  set(changes) {
    Object.assign(this, changes);
    this.charts.forEach((chart) => chart.rebuild());
  }

  /** A log-scale box and a smoothing slider. */
  controls() {
    const log = h("input", { type: "checkbox", onchange: () => this.set({ log: log.checked }) });
    const shown = h("output", {}, "0");
    const weight = h("input", { type: "range", min: 0, max: 0.99, step: 0.01, value: 0, oninput: () => {
      shown.textContent = weight.value;
      this.set({ smoothing: Number(weight.value) });
    } });
    return h("div", { class: "chart-controls" },
      h("label", {}, log, " log scale"), h("label", {}, "smoothing ", weight), shown);
  }
}

class StepChart {
  /** `el` gets the chart; its data-points attribute counts the plotted points and data-scale names the
   *  y scale, for people and tests. */
  constructor(el, title, labels, style) {
    this.el = el;
    this.title = title;
    this.labels = labels;
    this.style = style;
    this.series = labels.map(() => new Map());
    this.empty = h("p", { class: "chart-empty" }, "no data yet");
    this.el.append(this.empty);
    this.plot = new uPlot(this.options(), this.data(), el);
    this.el.dataset.points = "0";
    this.el.dataset.scale = style.log ? "log" : "linear";
    this.resize = () => this.plot.setSize({ width: this.width(), height: CHART_HEIGHT });
    // The holder's width is only final once the page has laid it out (a chart made before its grid is on
    // the page, one the grid re-flows as others join it): the plot follows its holder, not the window.
    this.sized = new ResizeObserver(this.resize);
    this.sized.observe(this.el);
    style.charts.add(this);
  }

  options() {
    return {
      title: this.title,
      width: this.width(),
      height: CHART_HEIGHT,
      // distr 3: a log scale; the values it cannot show (zero, negative) are left out, not drawn as 0.
      scales: { x: { time: false }, y: { distr: this.style.log ? 3 : 1 } },
      legend: { live: false },
      axes: [{ label: "step" }, { size: 70 }],
      series: [
        { label: "step" },
        ...this.labels.map((label, i) => {
          const colour = PALETTE[i % PALETTE.length];
          return {
            label,
            stroke: colour,
            width: 1.5,
            spanGaps: true,
            // A line needs two points: a series of one (the epoch time of a one-epoch job) is drawn as a dot.
            points: {
              show: (plot, index) => plot.data[index].filter((v) => v !== null).length === 1,
              size: 8,
              fill: colour,
            },
          };
        }),
      ],
    };
  }

  data() {
    const [steps, ...columns] = alignSeries(this.series);
    const shown = columns.map((values) => smooth(values, this.style.smoothing)
      .map((v) => (this.style.log && !(v > 0) ? null : v)));
    return [steps, ...shown];
  }

  width() {
    // clientWidth includes the holder's padding, which the plot must leave free.
    const style = getComputedStyle(this.el);
    return Math.max(this.el.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight), 240);
  }

  /** Adds (step, value) pairs to series `index` and redraws. */
  add(index, points) {
    for (const [step, value] of points) this.series[index].set(step, value);
    this.draw();
  }

  /** Series `index` becomes exactly these (step, value) pairs. */
  replace(index, points) {
    this.series[index] = new Map(points);
    this.draw();
  }

  /** A series more, drawn from now on; its index is returned. */
  addSeries(label) {
    this.labels.push(label);
    this.series.push(new Map());
    this.rebuild();
    return this.series.length - 1;
  }

  draw() {
    this.plot.setData(this.data());
    const points = this.series.reduce((n, s) => n + s.size, 0);
    this.el.dataset.points = String(points);
    this.empty.hidden = points > 0;
  }

  /** The scale's kind is fixed when a uPlot is made, so a change of style makes a new one. */
  rebuild() {
    this.plot.destroy();
    this.plot = new uPlot(this.options(), this.data(), this.el);
    this.el.dataset.scale = this.style.log ? "log" : "linear";
  }

  destroy() {
    this.sized.disconnect();
    this.style.charts.delete(this);
    this.plot.destroy();
  }
}
