"""The job page of a job that depends on others, in the real browser of tests/integration/test_dashboard.py:
the jobs of its depends_on as links, and the job whose checkpoint it resumes from."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.integration.jobs import submit
from tests.integration.servers import Stack
from tests.integration.test_dashboard import CHROMIUM, browser, page  # noqa: F401 (the fixtures)
from tests.integration.test_dependencies import PRETRAIN, after

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="Debian's chromium is not installed: `make test` installs it"
)


def test_a_job_page_links_the_jobs_it_depends_on(embedded_stack: Stack, page: Page) -> None:  # noqa: F811
    with embedded_stack.client() as client:
        first, second = submit(client, PRETRAIN), submit(client, PRETRAIN)
        spec = after(second["id"], 2)
        waiting = submit(client, {**spec, "depends_on": [first["id"], second["id"]]})
        # What the page shows is the spec's: the jobs need not run.
        for job in (first, second):
            client.post(f"/v1/jobs/{job['id']}/cancel")
    page.goto(f"{embedded_stack.url}/#/jobs/{waiting['id']}")
    depends = page.locator(".facts div").filter(has=page.locator("dt", has_text="depends on"))
    expect(depends.get_by_role("link")).to_have_text([f"#{first['id']}", f"#{second['id']}"])
    resumes = page.locator('[data-record="spec"] .record div').filter(has_text="resumes from")
    expect(resumes).to_have_text(f"resumes fromjob #{second['id']}'s latest checkpoint")
    depends.get_by_role("link", name=f"#{second['id']}").click()
    expect(page.get_by_role("heading", level=2)).to_contain_text(f"#{second['id']} ")
