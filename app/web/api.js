"use strict";
// The page's only link to Trainyard: the /v1 API, called with the key kept in this browser's localStorage.

const TOKEN_KEY = "trainyard.token";
const TERMINAL = new Set(["succeeded", "failed", "timed_out", "cancelled", "pruned"]);
const POLL_MS = 2000;

class ApiError extends Error {
  constructor(status, detail) {
    super(`${status}: ${detail}`);
    this.status = status;
    this.detail = detail;
  }
}

const api = {
  token: () => localStorage.getItem(TOKEN_KEY) || "",
  setToken(value) {
    if (value) localStorage.setItem(TOKEN_KEY, value);
    else localStorage.removeItem(TOKEN_KEY);
  },
  headers(extra = {}) {
    const token = api.token();
    return token ? { ...extra, Authorization: `Bearer ${token}` } : extra;
  },

  async request(method, path, { signal, headers } = {}) {
    const response = await fetch(path, { method, headers: api.headers(headers), signal });
    if (!response.ok) {
      // Errors are problem+json whose detail says what to fix; show that rather than a bare status.
      const body = await response.json().catch(() => ({}));
      const error = new ApiError(response.status, body.detail || response.statusText);
      if (response.status === 401) window.dispatchEvent(new CustomEvent("trainyard:unauthorized"));
      throw error;
    }
    return response;
  },
  async get(path, signal) {
    return (await api.request("GET", path, { signal })).json();
  },
  async post(path) {
    return (await api.request("POST", path)).json();
  },
  /** For endpoints newer than some servers: null when this server does not have one. */
  async optional(path, signal) {
    try {
      return await api.get(path, signal);
    } catch (error) {
      if (error.status === 404 || error.status === 405) return null;
      throw error;
    }
  },

  /** A download link cannot carry a bearer header, so with a key the file is fetched and handed over. */
  async download(path, filename) {
    const blob = await (await api.request("GET", path)).blob();
    const link = Object.assign(document.createElement("a"), { href: URL.createObjectURL(blob), download: filename });
    link.click();
    URL.revokeObjectURL(link.href);
  },
};

/** Every point of one metric of a job, shortened by the server to a plottable number where it can. */
async function metricSeries(jobId, name, signal) {
  const series = new Map();
  let after = -1;
  while (after !== null) {
    const page = await api.get(`/v1/jobs/${jobId}/metrics?name=${encodeURIComponent(name)}&max_points=2000&after_step=${after}`, signal);
    page.data.forEach((r) => series.set(r.step, r.value));
    after = page.next_after_step;
  }
  return series;
}

const sleep = (ms, signal) =>
  new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => { clearTimeout(timer); resolve(); }, { once: true });
  });

/** Calls `fn` now and every `ms` until the view that asked is left; a failed call shows and retries. */
async function every(ms, signal, fn) {
  while (!signal.aborted) {
    try {
      await fn();
      showError(null);
    } catch (error) {
      if (!signal.aborted) showError(error);
    }
    await sleep(ms, signal);
  }
}

function showError(error) {
  const banner = document.getElementById("error");
  banner.hidden = !error;
  if (!error) return;
  banner.textContent = error.status === 401
    ? "This server needs an API key: paste one in the key box above (trainyard keys create --user <you>)."
    : `Request failed: ${error.message}`;
}

/** Every metric row of a job once, oldest first: history by paging, then the SSE stream while the job
 *  runs, or polling where this server has no stream. `isLive` says whether more rows can still come. */
async function followMetrics(jobId, onRows, isLive, signal) {
  const seen = new Set();
  let last = -1;
  const take = (rows) => {
    const fresh = rows.filter((r) => r && r.name !== undefined && !seen.has(`${r.name}@${r.step}`));
    fresh.forEach((r) => { seen.add(`${r.name}@${r.step}`); last = Math.max(last, r.step); });
    if (fresh.length) onRows(fresh);
  };
  let canStream = true;
  while (!signal.aborted) {
    const live = isLive();
    // A step's rows may still be landing when a read ends, so each read starts one step back.
    await pollMetrics(jobId, Math.max(last - 1, -1), take, signal);
    if (!live) return;
    if (canStream) canStream = await streamMetrics(jobId, last, take, signal).catch(() => true);
    await sleep(canStream ? 500 : POLL_MS, signal);
  }
}

async function pollMetrics(jobId, afterStep, take, signal) {
  let after = afterStep;
  while (after !== null && !signal.aborted) {
    const page = await api.get(`/v1/jobs/${jobId}/metrics?after_step=${after}&limit=5000`, signal);
    take(page.data);
    after = page.next_after_step;
  }
}

/** Reads text/event-stream through fetch (EventSource cannot send a bearer header). False: no stream here. */
async function streamMetrics(jobId, afterStep, take, signal) {
  const path = `/v1/jobs/${jobId}/metrics/stream?after_step=${afterStep}`;
  let response;
  try {
    response = await api.request("GET", path, { signal, headers: { Accept: "text/event-stream" } });
  } catch (error) {
    if (error.status === 404 || error.status === 405) return false;
    throw error;
  }
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return true;
    buffer = (buffer + value).replace(/\r\n?/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      take(metricRows(buffer.slice(0, end)));
      buffer = buffer.slice(end + 2);
    }
  }
}

/** The metric rows in one SSE message, whether it carries one row, a list, or a {data: [...]} page. */
function metricRows(message) {
  const data = message.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trim()).join("\n");
  if (!data) return [];
  let parsed;
  try {
    parsed = JSON.parse(data);
  } catch {
    return [];
  }
  const rows = Array.isArray(parsed) ? parsed : Array.isArray(parsed.data) ? parsed.data : [parsed];
  return rows.filter((r) => r && typeof r.step === "number" && typeof r.value === "number");
}
