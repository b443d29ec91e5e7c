"""The dashboard in a real browser: headless Debian Chromium driven by Playwright against the real service
(uvicorn + Celery worker + torchrun on the embedded backend)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.integration.jobs import example_spec, metric_values, submit, wait_status
from tests.integration.servers import Stack

CHROMIUM = Path("/usr/bin/chromium")
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
    yield context.new_page()
    context.close()


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


def test_follow_a_running_job_and_cancel_it(embedded_stack: Stack, page: Page, shots: Path) -> None:
    # Enough epochs that the job is still running while the page is watched; the cancel ends it.
    spec = example_spec(
        "digits_ddp_cpu.json",
        train={"epochs": 2000},
        checkpoint={"every_n_epochs": 2, "keep_last": 2},
        limits={"max_runtime_s": 300},
    )
    spec["name"] = "dashboard-watch"
    with embedded_stack.client() as client:
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
        for watcher in (page, polling):
            first = wait_for_more_points(watcher, "loss", 0)
            wait_for_more_points(watcher, "loss", first)
        assert any(f"/v1/jobs/{job_id}/metrics/stream" in url for url in streams)
        polling.close()

        expect(page.locator(".card .status").first).to_have_text("running")
        expect(page.get_by_role("link", name="download").first).to_be_visible(timeout=60_000)
        expect(page.locator("pre.log")).not_to_be_empty(timeout=30_000)
        # Rank 0 prints a line per reported step; the launcher's log does not.
        page.get_by_label("show").select_option("rank 0")
        expect(page.locator("pre.log")).to_contain_text("loss=", timeout=30_000)
        page.screenshot(path=shots / "job.png", full_page=True)

        page.get_by_role("button", name="Cancel").click()
        expect(page.locator(".card .status").first).to_have_text("cancelled", timeout=60_000)
        expect(page.get_by_role("button", name="Cancel")).to_be_disabled()
        assert wait_status(client, job_id, {"cancelled"}, timeout=5)["status"] == "cancelled"


def test_overview_pages_compare_gpus_and_queue(embedded_stack: Stack, page: Page, shots: Path) -> None:
    with embedded_stack.client() as client:
        finished = submit(client, {**example_spec("digits_ddp_cpu.json"), "name": "dashboard-compare"})
        wait_status(client, finished["id"], {"succeeded"})
        loss_points = len(metric_values(client, finished["id"], "loss"))

    page.goto(embedded_stack.url + "/")
    page.locator(f'tr[data-job="{finished["id"]}"] input[type=checkbox]').check()
    page.screenshot(path=shots / "jobs.png")
    page.get_by_role("button", name="Compare loss").click()
    expect(page).to_have_url(f"{embedded_stack.url}/#/compare?ids={finished['id']}")
    expect(page.locator('.chart[data-metric="loss"]')).to_have_attribute("data-points", str(loss_points))

    page.get_by_role("link", name="GPUs").click()
    # This CPU box's worker registers with no GPUs; the page names the host and says so.
    host = page.locator("section[data-host]")
    expect(host).to_have_count(1)
    expect(host).to_contain_text("No GPUs on this host")
    page.screenshot(path=shots / "gpus.png")

    page.get_by_role("link", name="Queue").click()
    expect(page.locator("main")).to_contain_text("Nothing is waiting.")


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
