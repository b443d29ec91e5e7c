"""The dashboard in a real browser: headless Debian Chromium driven by Playwright against the real service
(uvicorn + Celery worker + torchrun on the embedded backend)."""

from __future__ import annotations

import json
import os
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from app.services.keys import LOCAL_USER
from tests.integration.jobs import PACED, TERMINAL, example_spec, metric_values, submit, wait_status
from tests.integration.servers import ROOT, Stack
from tests.integration.test_program_e2e import push
from tests.integration.test_sweeps import BUNDLES, PROGRAM_SPEC, wait_done
from tests.integration.test_sweeps import push as push_bundle
from tests.integration.test_user_code_lifecycle import factories

CHROMIUM = Path("/usr/bin/chromium")
PACE_S = 0.05  # a paced step's sleep
# Without the background-networking flags Chromium keeps dialling Google, which this closed network refuses.
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="Debian's chromium is not installed: `make test` installs it"
)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        # executable_path: Playwright must never fetch a browser of its own; Debian's is the one used.
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_FLAGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    opened = context.new_page()
    # The dashboard's Content-Security-Policy (app/api/routes/web.py) refuses inline scripts and styles;
    # Chromium reports each refusal on the console, and every page a test shows must do without them.
    refused: list[str] = []
    opened.on("console", lambda message: refused.append(message.text))
    yield opened
    context.close()
    assert [text for text in refused if "Content Security Policy" in text] == []


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    """Where screenshots go, to be looked at: $DASHBOARD_SCREENSHOTS, or the test's temp dir."""
    return Path(os.environ.get("DASHBOARD_SCREENSHOTS", tmp_path))


def plotted_points(page: Page, metric: str) -> int:
    return int(page.locator(f'.chart[data-metric="{metric}"]').get_attribute("data-points") or 0)


def wait_for_more_points(page: Page, metric: str, than: int, timeout: float = 90) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        points = plotted_points(page, metric)
        if points > than:
            return points
        time.sleep(0.25)
    raise AssertionError(f"the {metric} chart stayed at {than} points for {timeout:.0f}s")


def wait_reported(client: httpx.Client, job_id: int, metric: str, timeout: float = 240) -> None:
    """Until the job itself has reported a point of `metric` through the API: on a loaded box a job may wait
    for a slot or start slowly, which a chart's wait must not be blamed for."""
    deadline = time.monotonic() + timeout
    while not metric_values(client, job_id, metric):
        if time.monotonic() > deadline:
            job = client.get(f"/v1/jobs/{job_id}").json()
            raise AssertionError(f"job {job_id} reported no {metric} in {timeout:.0f}s: {job['status']}")
        time.sleep(0.5)


def drawn_pixels(page: Page, metric: str, timeout: float = 10) -> int:
    """The pixels of a chart's plot in its first series' colour (PALETTE[0], #2563eb, in app/web/charts.js):
    what it drew of its data, once it drew any."""
    count_them = """(metric) => {
        const canvas = document.querySelector(`.chart[data-metric="${metric}"] canvas`);
        const { data } = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height);
        let count = 0;
        for (let i = 0; i < data.length; i += 4) {
            if (data[i] < 120 && data[i + 1] < 160 && data[i + 2] > 180 && data[i + 3] > 0) count += 1;
        }
        return count;
    }"""
    deadline = time.monotonic() + timeout
    while (drawn := int(page.evaluate(count_them, metric))) == 0 and time.monotonic() < deadline:
        time.sleep(0.25)
    return drawn


def test_follow_a_running_job_cancel_it_and_retry_it(embedded_stack: Stack, page: Page, shots: Path) -> None:
    with embedded_stack.client() as client:
        # A user's model on two DDP ranks whose steps take a set time, asleep: it runs while the page is
        # watched, for as long as the test needs, without taking the cores (a digits job training flat out
        # for as long cost the suite over a minute of CPU); the cancel ends it.
        spec = {
            **factories(push_bundle(client, PACED), PACE_S, max_steps=100_000),
            "name": "dashboard-watch",
            "limits": {"max_runtime_s": 300},
        }
        job = submit(client, spec)
        job_id = job["id"]

        streams: list[str] = []
        page.on("request", lambda request: streams.append(request.url) if "/stream" in request.url else None)
        page.goto(embedded_stack.url + "/")
        row = page.locator(f'tr[data-job="{job_id}"]')
        expect(row).to_contain_text("dashboard-watch")
        row.get_by_role("link", name=f"#{job_id}").click()
        expect(page).to_have_url(f"{embedded_stack.url}/#/jobs/{job_id}")

        # A second page plays a server from before the SSE endpoint: it must fall back to polling.
        polling = page.context.new_page()
        polling.route("**/metrics/stream*", lambda route: route.fulfill(status=404))
        polling.goto(f"{embedded_stack.url}/#/jobs/{job_id}")

        # The curves grow while the pages are open: points arrive after the first ones were drawn.
        wait_reported(client, job_id, "loss")
        for watcher in (page, polling):
            first = wait_for_more_points(watcher, "loss", 0)
            wait_for_more_points(watcher, "loss", first)
        assert any(f"/v1/jobs/{job_id}/metrics/stream" in url for url in streams)
        polling.close()

        expect(page.locator(".card .status").first).to_have_text("running")
        expect(page.get_by_role("link", name="download").first).to_be_visible(timeout=60_000)
        # Rank 0's log comes first: it prints a line per reported step. The launcher's holds its command.
        expect(page.locator("pre.log")).to_contain_text("loss=", timeout=30_000)
        page.screenshot(path=shots / "job.png", full_page=True)
        page.get_by_label("show").select_option("launcher")
        expect(page.locator("pre.log")).to_contain_text("=== attempt 1", timeout=30_000)

        page.get_by_role("button", name="Cancel").click()
        expect(page.locator(".card .status").first).to_have_text("cancelled", timeout=60_000)
        expect(page.get_by_role("button", name="Cancel")).to_be_hidden()
        assert wait_status(client, job_id, {"cancelled"}, timeout=5)["status"] == "cancelled"

        # The retry goes on from the cancelled job's last checkpoint: its page links the parent and draws the
        # parent's loss before its own.
        child = client.post(f"/v1/jobs/{job_id}/retry").json()["job"]
        page.goto(f"{embedded_stack.url}/#/jobs/{child['id']}")
        made_from = page.locator(".facts div", has_text="made from")
        expect(made_from.get_by_role("link", name=f"#{job_id}")).to_be_visible()
        expect(page.locator('.chart[data-metric="loss"] .u-legend')).to_contain_text(
            f"loss before #{child['id']}"
        )
        wait_for_more_points(page, "loss", 0)
        client.post(f"/v1/jobs/{child['id']}/cancel")
        wait_status(client, child["id"], {"cancelled"})


def test_the_record_of_finished_jobs_side_by_side_and_a_failure(
    embedded_stack: Stack, page: Page, shots: Path
) -> None:
    reported = {
        "metrics": {"every_n_steps": 5, "tensorboard": True},
        "profile": {"steps": 2, "skip_first": 2},
    }
    ddp = {**example_spec("digits_ddp_cpu.json", **reported), "name": "dashboard-compare"}
    single = {
        **example_spec("digits_ddp_cpu.json", train={"lr": 0.05, "epochs": 1}),
        "name": "dashboard-lr005",
    }
    single["parallel"] = {"strategy": "single"}
    # An empty folder passes the submit's check of data.root; the trainer then finds no MNIST files in it.
    (Path(embedded_stack.env["TRAINYARD_DATA_DIR"]) / "mnist-empty").mkdir(parents=True, exist_ok=True)
    broken = {
        "name": "dashboard-fails",
        "model": {"arch": "mlp"},
        "data": {"dataset": "mnist", "root": "mnist-empty"},
    }
    with embedded_stack.client() as client:
        jobs = [submit(client, spec) for spec in (ddp, single, broken)]
        finished, other, failed = (wait_status(client, job["id"], TERMINAL) for job in jobs)
        assert (finished["status"], other["status"], failed["status"]) == ("succeeded", "succeeded", "failed")
        loss, throughput = (
            sum(len(metric_values(client, job["id"], name)) for job in (finished, other))
            for name in ("loss", "samples_per_s")
        )
        epoch_times = len(metric_values(client, finished["id"], "epoch_time_s"))
    assert epoch_times == ddp["train"]["epochs"]

    page.goto(embedded_stack.url + "/")
    row = page.locator(f'tr[data-job="{finished["id"]}"]')
    # The page writes numbers as JavaScript's toPrecision(4) does.
    for shown in ("ddp", "2 processes on cpu", "fp32", f"{finished['latest_metrics']['eval_accuracy']:#.4g}"):
        expect(row).to_contain_text(shown)
    expect(page.locator(f'tr[data-job="{failed["id"]}"] .row-reason')).to_contain_text("exception: ")
    for job in (finished, other):
        page.locator(f'tr[data-job="{job["id"]}"] input[type=checkbox]').check()
    page.screenshot(path=shots / "jobs.png")
    page.get_by_role("button", name="Compare").click()
    expect(page).to_have_url(f"{embedded_stack.url}/#/compare?ids={finished['id']},{other['id']}")
    chart = page.locator(".chart.spaced")
    expect(chart).to_have_attribute("data-points", str(loss))
    expect(chart.locator(".u-legend")).to_contain_text(f"#{other['id']} dashboard-lr005")
    summary = page.locator(".diff-summary")
    expect(summary).to_contain_text("strategy ddp vs single")
    expect(summary).to_contain_text("lr 0.1 vs 0.05")
    page.get_by_label("metric").select_option("samples_per_s")
    expect(page.locator('.chart[data-metric="samples_per_s"]')).to_have_attribute(
        "data-points", str(throughput)
    )
    page.screenshot(path=shots / "compare.png", full_page=True)

    page.goto(f"{embedded_stack.url}/#/jobs/{finished['id']}")
    expect(page.get_by_role("button", name="Cancel")).to_be_hidden()
    expect(page.locator('.chart[data-metric="loss"]')).not_to_have_attribute("data-points", "0")
    # A finished job's curves arrive whole, before its grid has settled: each plot still fits its card.
    overflowing = page.evaluate(
        "[...document.querySelectorAll('.chart')]"
        ".filter((c) => c.querySelector('.uplot').offsetWidth > c.clientWidth).map((c) => c.dataset.metric)"
    )
    assert overflowing == []
    expect(page.locator('[data-record="spec"]')).to_contain_text("sgd · lr 0.1 · momentum 0.9")
    expect(page.locator('[data-record="plan"]')).to_contain_text("2 processes on cpu (gloo)")
    startup = page.locator('[data-record="start-up"]')
    for phase in [p["phase"].replace("_", " ") for p in finished["timings"]["phases"]] + ["to first step"]:
        expect(startup).to_contain_text(phase)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=embedded_stack.url)
    page.locator('[data-record="spec"]').get_by_role("button", name="Copy as JSON").click()
    assert json.loads(page.evaluate("navigator.clipboard.readText()")) == finished["spec"]
    for metric in ("samples_per_s", "step_time_s", "peak_mem_mb"):
        wait_for_more_points(page, metric, 0)
    expect(page.locator('.chart[data-metric="epoch_time_s"]')).to_have_attribute(
        "data-points", str(epoch_times)
    )
    page.get_by_label("log scale").check()
    expect(page.locator('.chart[data-scale="linear"]')).to_have_count(0)
    expect(page.locator('[data-record="tools"]')).to_contain_text("2 steps from step 3 on cpu")
    expect(page.get_by_role("link", name="Chrome trace (Perfetto)")).to_be_visible()
    with page.expect_download() as download:
        page.get_by_role("link", name="TensorBoard event files (.tar)").click()
    with tarfile.open(download.value.path()) as tar:
        assert any(name.startswith(f"job{finished['id']}/events.out.tfevents.") for name in tar.getnames())
    page.screenshot(path=shots / "record.png", full_page=True)

    # A one-epoch job's epoch time is a single point, which no line can join: the point itself is drawn. The
    # page's first read of the job fails, as a busy database answers: the page reads it again.
    busy = {"status": 503, "content_type": "application/problem+json", "body": '{"detail": "database busy"}'}
    page.route(f"**/v1/jobs/{other['id']}", lambda route: route.fulfill(**busy), times=1)
    page.goto(f"{embedded_stack.url}/#/jobs/{other['id']}")
    expect(page.locator('.chart[data-metric="epoch_time_s"]')).to_have_attribute("data-points", "1")
    assert drawn_pixels(page, "epoch_time_s") > 0
    expect(page.locator('.chart[data-metric="eval_accuracy"]')).to_be_visible()
    expect(page.locator(".facts div", has_text="owner")).to_contain_text(LOCAL_USER)
    page.screenshot(path=shots / "one-epoch.png", full_page=True)

    page.goto(f"{embedded_stack.url}/#/jobs/{failed['id']}")
    expect(page.locator(".message")).to_contain_text("data.root")
    expect(page.locator('.chart[data-metric="loss"] .chart-empty')).to_have_text("no data yet")
    expect(page.get_by_role("button", name="Cancel")).to_be_hidden()
    page.screenshot(path=shots / "failed.png", full_page=True)

    page.get_by_role("link", name="GPUs").click()
    # This CPU box's worker registers with no GPUs; the page names the host and says so.
    host = page.locator("section[data-host]")
    expect(host).to_have_count(1)
    expect(host).to_contain_text("No GPUs on this host")
    page.screenshot(path=shots / "gpus.png")
    # A GPU box's answer, one GPU drained: each GPU's health, and why.
    gpu = {
        "name": "NVIDIA H200",
        "memory_total_mb": 143771,
        "job_id": None,
        "health": "ok",
        "health_reason": None,
    }
    why = "fans failing (an admin, 2026-11-30 06:14 UTC)"
    box = {"host": "gpu-box", "address": "10.0.0.2", "status": "up", "worker_id": "gpu-box:7"}
    box |= {"heartbeat_at": "2026-11-30T06:14:00Z"}
    box["gpus"] = [{**gpu, "index": 0}, {**gpu, "index": 1, "health": "drained", "health_reason": why}]
    page.route("**/v1/gpus", lambda route: route.fulfill(json={"data": [box]}))
    page.reload()
    expect(page.locator('tr[data-health="drained"]')).to_contain_text(f"drained{why}")
    expect(page.locator('tr[data-health="ok"] .health-ok')).to_have_text("ok")
    page.screenshot(path=shots / "gpus-health.png")
    page.unroute("**/v1/gpus")

    page.get_by_role("link", name="Queue").click()
    expect(page.locator("main")).to_contain_text("Nothing is waiting.")


def test_a_sweep_s_page_draws_its_trials_best_so_far_curves_and_parameters(
    embedded_stack: Stack, page: Page, shots: Path
) -> None:
    body = json.loads((ROOT / "examples" / "sweeps" / "digits_lr.json").read_text())
    # Two trials of two short epochs: two evaluations (the objective's reports) each, in seconds.
    body["spec"]["train"].update(epochs=2, batch_size=64)
    body.update(name="dashboard-sweep", max_trials=2, parallel=2, pruner="none", pruner_options={})
    with embedded_stack.client() as client:
        created = client.post("/v1/sweeps", json=body)
        assert created.status_code == 201, created.text
        sweep = wait_done(client, created.json()["id"], timeout=180)
        trials = client.get(f"/v1/sweeps/{sweep['id']}/trials").json()["data"]
        reports = sum(len(metric_values(client, t["job_id"], "eval_loss")) for t in trials)
    assert sweep["status"] == "completed" and [t["state"] for t in trials] == ["completed"] * 2, trials
    assert reports == 4

    page.goto(embedded_stack.url + "/")
    page.get_by_role("link", name="Sweeps").click()
    listed = page.locator(f'tr[data-sweep="{sweep["id"]}"]')
    expect(listed).to_contain_text("2 completed")
    page.screenshot(path=shots / "sweeps.png")
    listed.get_by_role("link", name="dashboard-sweep").click()
    expect(page).to_have_url(f"{embedded_stack.url}/#/sweeps/{sweep['id']}")
    expect(page.locator(".card .status").first).to_have_text("completed")
    best = sweep["best"]
    expect(page.locator('[data-fact="best so far"]')).to_contain_text(f"trial {best['trial']}")
    expect(page.locator('[data-fact="by state"] dd')).to_have_text("2 completed")
    rows = page.locator("tr[data-trial]")
    expect(rows).to_have_count(2)
    for trial in trials:
        row = page.locator(f'tr[data-trial="{trial["number"]}"]')
        expect(row).to_contain_text("completed")
        expect(row.get_by_role("link", name=f"#{trial['job_id']}")).to_be_visible()
    # The trials come in trial order; a click on the header they are sorted by turns it around.
    page.locator("table.trials th").first.click()
    expect(rows.first).to_have_attribute("data-trial", "1")
    # Best so far: a point per ended trial and each completed trial's value; the curves: every report.
    expect(page.locator('.chart[data-metric="best-so-far"]')).to_have_attribute("data-points", "4")
    expect(page.locator('.chart[data-metric="curves"]')).to_have_attribute("data-points", str(reports))
    assert drawn_pixels(page, "best-so-far") > 0
    assert drawn_pixels(page, "curves") > 0
    # A polyline per trial through its one parameter and its objective.
    lines = page.locator(".parallel svg polyline")
    expect(lines).to_have_count(2)
    assert all(
        len(line.split()) == 2 for line in lines.evaluate_all("ls => ls.map((l) => l.getAttribute('points'))")
    )
    page.screenshot(path=shots / "sweep.png", full_page=True)

    page.locator(f'tr[data-trial="{best["trial"]}"]').get_by_role("link", name=f"#{best['job_id']}").click()
    trial_of = page.locator(".facts div", has_text="sweep")
    expect(trial_of).to_contain_text(f"trial {best['trial']} of sweep {sweep['id']}")
    trial_of.get_by_role("link").click()
    expect(page).to_have_url(f"{embedded_stack.url}/#/sweeps/{sweep['id']}")


def test_with_auth_on_the_key_box_lets_the_page_in(auth_stack: Stack, page: Page) -> None:
    token = auth_stack.admin_key("ada")

    page.goto(auth_stack.url + "/")
    expect(page.get_by_role("alert")).to_contain_text("needs an API key")
    page.get_by_placeholder("API key").fill(token)
    page.get_by_role("button", name="Save key").click()
    expect(page.get_by_role("alert")).to_be_hidden()
    expect(page.locator("main")).to_contain_text("No jobs yet")

    # The key is kept in this browser: a reload is let in without typing it again.
    page.reload()
    expect(page.locator("main")).to_contain_text("No jobs yet")
    expect(page.get_by_role("alert")).to_be_hidden()


def test_a_program_job_s_spec_card_shows_its_argv_and_hyperparameters(
    embedded_stack: Stack, page: Page, tmp_path: Path
) -> None:
    # It names its accuracy its own way: eval_acc, a chart of its own, and no empty "eval accuracy" beside it.
    (tmp_path / "hello.py").write_text(
        "import trainyard.job as ty\nty.init()\nty.report_eval(1, acc=0.75)\nprint('hello')\n"
    )
    spec = {
        "name": "dashboard-program",
        "code": push(embedded_stack, tmp_path),
        "program": {"entrypoint": ["python", "hello.py", "--lr", "3e-4"], "hyperparameters": {"warmup": 100}},
    }
    with embedded_stack.client() as client:
        job = wait_status(client, submit(client, spec)["id"], TERMINAL)
    assert job["status"] == "succeeded", job["message"]
    page.goto(f"{embedded_stack.url}/#/jobs/{job['id']}")
    card = page.locator('[data-record="spec"]')
    expect(card).to_contain_text("python hello.py --lr 3e-4")
    expect(card).to_contain_text("warmup 100")
    expect(page.locator('.chart[data-metric="eval_acc"]')).to_have_attribute("data-points", "1")
    expect(page.locator('.chart[data-metric="eval_accuracy"]')).to_be_hidden()
    expect(page.locator('.chart[data-metric="loss"]')).to_be_visible()


# Each trial's look's colour, as the page's legend, the curves' legend and the parallel coordinates show it.
# A legend that is not live has no row for the x series.
LOOK_COLOURS = """() => {
    const colour = (el) => getComputedStyle(el).borderTopColor;
    const legend = Object.fromEntries([...document.querySelectorAll(".looks li")]
        .map((li) => [li.dataset.look, colour(li.querySelector(".swatch"))]));
    const markers = (metric) => Object.fromEntries([...document.querySelectorAll(
        `.chart[data-metric="${metric}"] .u-legend .u-series`)]
        .map((row) => [row.querySelector(".u-label").textContent, colour(row.querySelector(".u-marker"))]));
    const lines = Object.fromEntries([...document.querySelectorAll(".pc-trial")]
        .map((line) => [line.dataset.trial, getComputedStyle(line).stroke]));
    return { legend, curves: markers("curves"), best: markers("best-so-far"), lines };
}"""


def test_a_sweep_s_trials_are_drawn_in_the_colours_its_legend_names(
    embedded_stack: Stack, page: Page, shots: Path
) -> None:
    # Grid seed 5 runs the rates in this order: 0.05 completes, 0.1 completes better (the best), the median
    # pruner stops 0.001 at its first report, and "boom" is no float (float() raises: the trial fails).
    with embedded_stack.client() as client:
        body = {
            "name": "dashboard-looks",
            "spec": {
                **PROGRAM_SPEC,
                "code": push_bundle(client, BUNDLES / "sweep_program"),
                "train": {"max_steps": 100},
            },
            "parameters": {
                "program.hyperparameters.lr": {"type": "categorical", "choices": [0.05, 0.1, 0.001, "boom"]}
            },
            "objective": {"metric": "eval_loss"},
            "max_trials": 4,
            "sampler": "grid",
            "pruner": "median",
            "pruner_options": {"n_startup_trials": 1, "n_min_trials": 1},
            "seed": 5,
        }
        created = client.post("/v1/sweeps", json=body)
        assert created.status_code == 201, created.text
        sweep = wait_done(client, created.json()["id"], timeout=240)
        trials = client.get(f"/v1/sweeps/{sweep['id']}/trials").json()["data"]
    states = [(t["params"]["program.hyperparameters.lr"], t["state"]) for t in trials]
    assert states == [(0.05, "completed"), (0.1, "completed"), (0.001, "pruned"), ("boom", "failed")], trials
    assert sweep["best"]["trial"] == 1, sweep["best"]
    looks = ["completed", "best", "pruned", "failed"]

    page.goto(f"{embedded_stack.url}/#/sweeps/{sweep['id']}")
    expect(page.locator(".pc-trial")).to_have_count(4)
    shown = page.evaluate(LOOK_COLOURS)
    legend = shown["legend"]
    assert sorted(legend) == sorted(["best", "completed", "running", "pruned", "failed"])
    assert len(set(legend.values())) == len(legend), f"two looks share a colour: {legend}"
    assert shown["curves"] == {f"trial {n} ({look})": legend[look] for n, look in enumerate(looks)}
    assert shown["lines"] == {str(n): legend[look] for n, look in enumerate(looks)}
    assert shown["best"] == {"best so far": legend["best"], "trial's value": legend["completed"]}
    assert drawn_pixels(page, "curves") > 0
    page.screenshot(path=shots / "sweep-looks.png", full_page=True)


def test_the_compare_page_fits_three_jobs_of_long_bundle_ids(
    embedded_stack: Stack, page: Page, tmp_path: Path, shots: Path
) -> None:
    jobs = []
    with embedded_stack.client() as client:
        for n in range(3):
            folder = tmp_path / f"bundle{n}"
            folder.mkdir()
            (folder / "hello.py").write_text(f"print({n})\n")
            spec = {
                "name": f"dashboard-bundle-{n}",
                "code": push_bundle(client, folder),
                "program": {"entrypoint": ["python", "hello.py"]},
            }
            jobs.append(submit(client, spec))
        for job in jobs:
            wait_status(client, job["id"], TERMINAL)
    page.goto(f"{embedded_stack.url}/#/compare?ids={','.join(str(job['id']) for job in jobs)}")
    expect(page.locator(".diff-summary")).to_contain_text("code sha256:")
    cells = page.locator("[data-diff] td.mono")
    expect(cells).to_have_count(3)
    for job, cell in zip(jobs, cells.all(), strict=True):
        assert cell.get_attribute("title") == job["spec"]["code"], "the whole id on hover"
        assert (cell.text_content() or "").endswith("…")
    headers = page.locator("[data-diff] th")
    expect(headers.last).to_contain_text("dashboard-bundle-2")
    right = max(box["x"] + box["width"] for box in (h.bounding_box() for h in headers.all()) if box)
    assert right <= 1280, f"the third job's column ends at {right:.0f}px, past the window's 1280"
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    page.screenshot(path=shots / "compare-bundles.png", full_page=True)
