"use strict";
// Line charts over training steps, drawn by the vendored uPlot.

const PALETTE = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#be185d", "#4d7c0f"];

/** uPlot wants one shared x array; series reported at different steps get nulls where they have no point. */
function alignSeries(series) {
  const steps = [...new Set(series.flatMap((s) => [...s.keys()]))].sort((a, b) => a - b);
  return [steps, ...series.map((s) => steps.map((step) => (s.has(step) ? s.get(step) : null)))];
}

class StepChart {
  /** `el` gets the chart; its data-points attribute counts the plotted points, for people and tests. */
  constructor(el, title, labels) {
    this.el = el;
    this.labels = labels;
    this.series = labels.map(() => new Map());
    this.plot = new uPlot(this.options(title), alignSeries(this.series), el);
    this.el.dataset.points = "0";
    this.resize = () => this.plot.setSize({ width: this.width(), height: 220 });
    window.addEventListener("resize", this.resize);
  }

  options(title) {
    return {
      title,
      width: this.width(),
      height: 220,
      scales: { x: { time: false } },
      legend: { live: false },
      axes: [{ label: "step" }, { size: 60 }],
      series: [
        { label: "step" },
        ...this.labels.map((label, i) => ({
          label,
          stroke: PALETTE[i % PALETTE.length],
          width: 1.5,
          spanGaps: true,
          points: { show: false },
        })),
      ],
    };
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

  draw() {
    this.plot.setData(alignSeries(this.series));
    this.el.dataset.points = String(this.series.reduce((n, s) => n + s.size, 0));
  }

  destroy() {
    window.removeEventListener("resize", this.resize);
    this.plot.destroy();
  }
}
