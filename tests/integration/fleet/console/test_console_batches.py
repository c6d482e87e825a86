"""The Batch jobs page in a real Chromium against the real stack: every tenant's jobs with their
progress, and an admin cancelling one (workers then answer its queued lines `cancelled`)."""

from __future__ import annotations

import json
import secrets

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from common.settings import FleetSettings
from gateway import BatchJobs, BatchSettings, FleetClient, JobState
from tests.integration.conftest import MODEL
from tests.integration.fleet.console.conftest import ConsoleSite, navigate, screenshot, sign_in, wait_for


async def test_the_batch_page_shows_every_tenants_jobs_and_an_admin_cancels_one(
        console: ConsoleSite, browser: WebDriver, client: FleetClient, stack: FleetSettings) -> None:
    jobs = BatchJobs(client, BatchSettings())
    tenants = [f"batch-page-{secrets.token_hex(3)}" for _ in range(2)]
    made = []
    for n, tenant in enumerate(tenants):
        job = await jobs.create(tenant, MODEL, name=f"night-{n}.jsonl")
        lines = [json.dumps({"custom_id": f"q{i}", "inputs": {"text": f"where is parcel {i}"}}).encode()
                 for i in range(5 + n)]
        await jobs.submit(job.id, tenant, iter(lines))
        made.append(job.id)

    sign_in(browser, console, console.admin_key)
    browser.get(console.url + "/batches")
    rows = {job: wait_for(browser, lambda d, job=job: d.find_element(By.CSS_SELECTOR, f'tr[data-job="{job}"]'),
                          f"the row of job {job}") for job in made}
    for (job, row), tenant, total in zip(rows.items(), tenants, ("5", "6"), strict=True):
        cells = row.text
        assert tenant in cells and MODEL in cells and row.find_element(By.CSS_SELECTOR, ".state").text in (
            "running", "completed"), cells
        assert row.find_elements(By.TAG_NAME, "td")[8].text == total
    screenshot(browser, "batches")

    row = rows[made[0]]
    row.find_element(By.NAME, "reason").send_keys("wrong file")
    navigate(browser, lambda: row.find_element(By.TAG_NAME, "button").click(), "the page after the cancel")
    assert f"batch job {made[0]} of {tenants[0]}: cancelled" in browser.page_source
    assert (await jobs.status(made[0], tenants[0], collect=False)).state is JobState.cancelled
    assert (await jobs.status(made[1], tenants[1], collect=False)).state is not JobState.cancelled


def test_a_reader_sees_the_jobs_and_cannot_cancel(console: ConsoleSite) -> None:
    with console.signed_in_client(console.reader_key) as reader:
        page = reader.get("/batches")
        assert page.status_code == 200 and "Batch jobs" in page.text and "<button>cancel</button>" not in page.text
        refused = reader.post("/batches/anyone/0123456789abcdef01234567/cancel", data={"reason": "no"})
        assert refused.status_code == 403
