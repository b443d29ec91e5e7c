"use strict";
// Routes (#/..., so the server serves one page), the key box, and small DOM and format helpers.

/** h("a", {href: "#/", onclick: fn}, "text", child): an element; null and false children are skipped. */
function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "class") el.className = value;
    else if (key.startsWith("data-") || key === "title") el.setAttribute(key, value);
    else el[key] = value;
  }
  el.append(...children.flat().filter((c) => c !== null && c !== false && c !== undefined));
  return el;
}

function statusBadge(status) {
  return h("span", { class: `status status-${status}` }, status);
}

function progressBar(progress) {
  const share = progress.total ? Math.min(progress.step / progress.total, 1) : 0;
  const label = progress.total ? `${progress.step} / ${progress.total}` : String(progress.step);
  const eta = progress.eta_s != null ? ` · ${formatDuration(progress.eta_s)} left` : "";
  const fill = h("div", { class: "progress-fill" });
  fill.style.width = `${(share * 100).toFixed(1)}%`;
  return h("div", { class: "progress", title: `step ${label}${eta}` }, fill, h("span", { class: "progress-label" }, label + eta));
}

/** A link that downloads `path`; with a key the file is fetched with it, as a plain link cannot send one. */
function downloadLink(path, filename, text) {
  return h("a", { href: path, download: filename, onclick: (event) => {
    if (!api.token()) return;
    event.preventDefault();
    api.download(path, filename).catch(showError);
  } }, text);
}

/** A button that copies `text()` to the clipboard and says so for a moment. */
function copyButton(label, text) {
  const button = h("button", { type: "button", onclick: async () => {
    try {
      await navigator.clipboard.writeText(text());
      button.textContent = "Copied";
    } catch {
      button.textContent = "Copy failed: select the text instead";
    }
    setTimeout(() => { button.textContent = label; }, 1500);
  } }, label);
  return button;
}

const jobLink = (id, text = `#${id}`) => h("a", { href: `#/jobs/${id}` }, text);
const sweepLink = (id, text = `#${id}`) => h("a", { href: `#/sweeps/${id}` }, text);
const formatTime = (iso) => (iso ? new Date(iso).toLocaleString() : "");
/** For narrow columns: "Nov 26, 06:58"; the full time shows on hover. */
const shortTime = (iso) => h("span", { title: formatTime(iso) },
  new Date(iso).toLocaleString([], { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" }));
function formatNumber(v) {
  if (typeof v !== "number") return "";
  const size = Math.abs(v);
  return size >= 1000 ? v.toFixed(0) : size && size < 1e-3 ? v.toExponential(2) : v.toPrecision(4);
}
/** plural(1, "process", "processes") is "1 process"; plural(2, "GPU") is "2 GPUs". */
const plural = (n, one, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;

/** Where a job runs: its leased GPUs, else its processes and device from the plan. */
function devicesText(job) {
  const plan = job.plan || {};
  if (job.gpu_ids?.length) return `${plural(job.gpu_ids.length, "GPU")} [${job.gpu_ids.join(", ")}]`;
  return `${plural(plan.world_size || 1, "process", "processes")} on ${plan.device || "?"}`;
}

/** Seconds from running to finished (or to now, while it runs); null before it ran. */
function runSeconds(job) {
  if (!job.running_at) return null;
  const end = job.finished_at ? new Date(job.finished_at) : new Date();
  return Math.max((end - new Date(job.running_at)) / 1000, 0);
}

function formatDuration(seconds) {
  const s = Math.round(seconds);
  return s >= 3600 ? `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`
    : s >= 60 ? `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s` : `${s}s`;
}

function formatBytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

function table(headings, rows, empty) {
  if (!rows.length) return h("p", { class: "empty" }, empty);
  // A wide table scrolls on its own rather than widening the page.
  return h("div", { class: "table-wrap" }, h("table", {},
    h("thead", {}, h("tr", {}, headings.map((t) => h("th", {}, t)))),
    h("tbody", {}, rows)));
}

// Each view renders into `root` and keeps itself fresh until `signal` aborts: the user went elsewhere.
const ROUTES = [
  [/^#\/?$/, () => jobsView],
  [/^#\/jobs\/(\d+)$/, (m) => (root, signal) => jobView(root, signal, Number(m[1]))],
  [/^#\/queue$/, () => queueView],
  [/^#\/gpus$/, () => gpusView],
  [/^#\/compare(?:\?ids=([\d,]*))?$/, (m) => (root, signal) => compareView(root, signal, idsOf(m[1]))],
  [/^#\/sweeps$/, () => sweepsView],
  [/^#\/sweeps\/(\d+)$/, (m) => (root, signal) => sweepView(root, signal, Number(m[1]))],
];

const idsOf = (text) => (text || "").split(",").map(Number).filter((n) => Number.isInteger(n) && n > 0);

let leaving = null;

function route() {
  leaving?.abort();
  const controller = new AbortController();
  leaving = controller;
  const root = document.getElementById("view");
  root.replaceChildren();
  showError(null);
  const hash = location.hash || "#/";
  for (const a of document.querySelectorAll("nav a")) {
    a.classList.toggle("active", hash === a.getAttribute("href") || hash.startsWith(`${a.getAttribute("href")}/`));
  }
  const match = ROUTES.map(([re, make]) => [hash.match(re), make]).find(([m]) => m);
  const view = match ? match[1](match[0]) : null;
  if (view) view(root, controller.signal);
  else root.append(h("p", { class: "empty" }, `Nothing at ${hash}.`));
}

function setUpKeyBox() {
  const input = document.getElementById("token");
  input.value = api.token();
  document.getElementById("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    api.setToken(input.value.trim());
    route();
  });
  window.addEventListener("trainyard:unauthorized", () => input.classList.add("needed"));
}

window.addEventListener("hashchange", route);
window.addEventListener("DOMContentLoaded", () => {
  setUpKeyBox();
  route();
});
