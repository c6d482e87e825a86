"""The console in a real headless Chromium against the real stack with two workers."""

from __future__ import annotations

from collections.abc import AsyncIterator

import contextlib
import re
import secrets
import signal
import time
from pathlib import Path

import httpx
import pytest
from aiokafka import AIOKafkaProducer
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import Select

from common.auth_keys import IssuedKey
from common.heartbeats import is_drained
from fleet.commands.debug import remaining_s, switch_off
from common.settings import FleetSettings
from gateway.client import FleetClient
from models.registry import ModelRegistry
from redis.asyncio import Redis
from schemas.names import DEFAULT_RESULTS_TOPIC, DLQ_TOPIC, requests_topic, versions_key
from schemas.wire import DeadLetter, ReplyTo, Result, Status
from tests.integration.conftest import MODEL, Process, end_offsets, read_from
from tests.integration.fleet.console.conftest import (ADMIN, ConsoleSite, free_port, issue_key, screenshot, sign_in,
                                                       submit, wait_for)
from versions.pointers import VersionPointers
from workers.delivery.dead_letters import DeadLetterPolicy

BACKLOG_STEP = 100  # records produced per step while the workers are paused
SECRET_TEXT = "write to carol.secret@example.com about order 77"


def total_lag(driver: WebDriver) -> int | None:
    cells = driver.find_elements(By.CSS_SELECTOR, f"#model-{MODEL} .total-lag")
    return int(cells[0].get_attribute("data-lag") or 0) if cells else None


def test_without_a_key_only_the_login_page(console: ConsoleSite, browser: WebDriver) -> None:
    browser.delete_all_cookies()
    for path in ("/", "/versions", "/dlq", "/workers", "/tenants", "/dlq/letter/0:0", "/live/overview"):
        browser.get(console.url + path)
        assert browser.current_url.startswith(console.url + "/login"), path
        assert browser.find_elements(By.ID, "login") and not browser.find_elements(By.TAG_NAME, "nav")
    screenshot(browser, "login")
    with console.signed_in_client(console.admin_key) as anonymous:
        anonymous.cookies.clear()
        for path in ("/dlq/replay", "/workers/console-w1/drain", "/tenants/create"):
            assert anonymous.post(path, data={"reason": "x"}).status_code == 401


async def test_overview_shows_both_workers_and_the_lag_rising_then_draining(
        console: ConsoleSite, browser: WebDriver, console_workers: list[Process], client: FleetClient,
        producer: AIOKafkaProducer) -> None:
    sign_in(browser, console, console.admin_key)
    wait_for(browser, lambda d: {"console-w1", "console-w2"} <= {
        row.get_attribute("data-worker") for row in d.find_elements(By.CSS_SELECTOR, f"#model-{MODEL} tr[data-worker]")},
        "both workers on the overview")
    # The workers are paused (SIGSTOP) while the backlog is produced, so the lag rises by exactly
    # what is produced, whatever the machine's speed; resumed, they drain it.
    for worker in console_workers:
        worker.popen.send_signal(signal.SIGSTOP)
    try:
        for step in (1, 2):
            for i in range(BACKLOG_STEP):
                request = client.build_request(MODEL, f"backlog {step}.{i} {secrets.token_hex(4)}", timeout=600,
                                               reply=ReplyTo(topic=DEFAULT_RESULTS_TOPIC))
                await producer.send(requests_topic(MODEL), request.encode())
            await producer.flush()
            wait_for(browser, lambda d: (total_lag(d) or 0) >= step * BACKLOG_STEP,  # noqa: B023 (called at once)
                     f"a lag of at least {step * BACKLOG_STEP} on the overview (it refreshes itself)")
        screenshot(browser, "overview-backlog")
    finally:
        for worker in console_workers:
            worker.popen.send_signal(signal.SIGCONT)
    wait_for(browser, lambda d: total_lag(d) == 0, "the lag to drain back to 0", timeout_s=240)
    wait_for(browser, lambda d: {"console-w1", "console-w2"} <= {
        row.get_attribute("data-worker") for row in d.find_elements(By.CSS_SELECTOR, f"#model-{MODEL} tr[data-worker]")},
        "both workers back on the overview")
    text = wait_for(browser, lambda d: d.find_element(By.ID, f"model-{MODEL}").text, "the model's section")
    assert "time to drain" in text and "requests in all" in text and "cache" in text
    # Each worker's heartbeat carries its last batch's size and its effective max batch size.
    batches = wait_for(browser, lambda d: [cell.text for cell in d.find_elements(
        By.CSS_SELECTOR, f"#model-{MODEL} tr[data-worker] .batch") if cell.text != "-"], "batch sizes on the overview")
    assert all(re.fullmatch(r"\d+ / [1-9]\d*", batch) for batch in batches), batches
    assert any(not batch.startswith("0 ") for batch in batches), f"the backlog was served in batches: {batches}"
    # Throughput, p99 and batch sizes are sampled every second (FLEET_CONSOLE_LAG_SAMPLE_S=1) and
    # plotted; each box says how many values it drew, and holds uPlot's canvas.
    for kind in ("per_s", "p99_ms", "batch"):
        drawn = wait_for(browser, lambda d: int(d.find_element(  # noqa: B023 (called at once)
            By.CSS_SELECTOR, f'#model-{MODEL} [data-kind="{kind}"]').get_attribute("data-points") or 0),
            f"the {kind} plot drawn with points", timeout_s=60)
        assert drawn >= 2, kind
        assert browser.find_elements(By.CSS_SELECTOR, f'#model-{MODEL} [data-kind="{kind}"] canvas'), kind
    plots = browser.find_element(By.CSS_SELECTOR, f"#model-{MODEL} .chart")
    browser.execute_script("arguments[0].scrollIntoView()", plots)
    screenshot(browser, "overview")  # the plots (docs/img/console/overview.png)


def produce_letter(client: FleetClient, code: str) -> tuple[str, bytes]:
    request = client.build_request(MODEL, SECRET_TEXT, timeout=600, reply=ReplyTo(topic=DEFAULT_RESULTS_TOPIC))
    raw = request.encode()
    letter = DeadLetter(reason="a test put it here", code=code, topic=requests_topic(MODEL), partition=0, offset=0,
                        original=raw, original_size=len(raw))
    return request.id, DeadLetterPolicy(keep_original=True).outgoing(letter).encode()


async def test_a_dead_letter_is_found_masked_replayed_and_answered(
        console: ConsoleSite, browser: WebDriver, console_workers: list[Process], client: FleetClient,
        producer: AIOKafkaProducer, stack: FleetSettings) -> None:
    code = f"console_test_{secrets.token_hex(3)}"
    request_id, letter = produce_letter(client, code)
    await producer.send_and_wait(DLQ_TOPIC, letter)
    sign_in(browser, console, console.admin_key)
    browser.get(f"{console.url}/dlq?code={code}")
    rows = browser.find_elements(By.CSS_SELECTOR, "#letters tr[data-ref]")
    assert len(rows) == 1 and code in rows[0].text
    screenshot(browser, "dead-letters")
    rows[0].find_element(By.TAG_NAME, "a").click()
    masked = wait_for(browser, lambda d: d.find_element(By.ID, "masked").text, "the letter's masked view")
    assert "<email>" in masked and request_id in masked
    assert "carol.secret@example.com" not in browser.page_source
    screenshot(browser, "dead-letter")

    before = await end_offsets(stack, DEFAULT_RESULTS_TOPIC)
    browser.find_element(By.CSS_SELECTOR, "#replay-one input[name=reason]").send_keys("replayed by the browser test")
    assert "1 replayed, 0 skipped" in submit(browser, browser.find_element(By.ID, "replay"))
    values = await read_from(stack, before, until=lambda vs: any(request_id.encode() in v for v in vs), timeout_s=120)
    results = [Result.decode(v) for v in values if request_id.encode() in v]
    assert results and results[0].id == request_id and results[0].status is Status.ok

    browser.get(f"{console.url}/dlq?code={code}")
    assert browser.find_element(By.CSS_SELECTOR, "#letters tr[data-ref] .replayed").text == "1x"
    browser.find_element(By.CSS_SELECTOR, "#letters input[name=ref]").click()
    browser.find_element(By.CSS_SELECTOR, "#replay-form input[name=reason]").send_keys("twice")
    assert "0 replayed, 1 skipped" in submit(browser, browser.find_element(By.ID, "replay-chosen"))  # not by accident
    browser.get(f"{console.url}/dlq?code={code}")
    browser.find_element(By.CSS_SELECTOR, "#letters input[name=ref]").click()
    browser.find_element(By.CSS_SELECTOR, "#replay-form input[name=reason]").send_keys("twice, on purpose")
    browser.find_element(By.CSS_SELECTOR, "#replay-form input[name=again]").click()
    assert "1 replayed" in submit(browser, browser.find_element(By.ID, "replay-chosen"))
    browser.get(f"{console.url}/dlq?code={code}")
    assert browser.find_element(By.CSS_SELECTOR, "#letters tr[data-ref] .replayed").text == "2x"
    assert "twice, on purpose" in browser.find_element(By.ID, "audit").text


@pytest.fixture
async def clean_pointers(redis: Redis) -> AsyncIterator[None]:
    await redis.delete(versions_key(MODEL))
    yield
    await redis.delete(versions_key(MODEL))


async def test_the_rollback_button_moves_the_stable_pointer(
        console: ConsoleSite, browser: WebDriver, redis: Redis, stack: FleetSettings, clean_pointers: None) -> None:
    registry = ModelRegistry(stack.registry_dir)
    fp32 = registry.resolve(MODEL, precision="fp32").id
    int8 = registry.resolve(MODEL, precision="int8").id
    await VersionPointers(redis, MODEL, registry).set_stable(fp32, "browser-test", "start from fp32")
    sign_in(browser, console, console.admin_key)

    def act(action: str, reason: str, version: str | None = None) -> str:
        browser.get(console.url + "/versions")
        section = browser.find_element(By.ID, f"versions-{MODEL}")
        form = section.find_element(By.CLASS_NAME, "version-form" if version else "rollout-form")
        if version:
            Select(form.find_element(By.NAME, "version")).select_by_visible_text(version)
        form.find_element(By.NAME, "reason").send_keys(reason)
        return submit(browser, form.find_element(By.CSS_SELECTOR, f"button[value='{action}']"))

    assert "start done" in act("start", "try int8", int8)
    assert "advance done" in act("advance", "shadow looked fine") and "at 1%" in browser.find_element(By.ID, "note").text
    assert "promote done" in act("promote", "int8 looks good")
    assert (await VersionPointers(redis, MODEL).get()).stable == int8
    note = act("rollback", "int8 answers drift")
    assert "rollback done" in note and f"stable {fp32}" in note
    assert (await VersionPointers(redis, MODEL).get()).stable == fp32
    browser.get(console.url + "/versions")
    assert browser.find_element(By.CSS_SELECTOR, f"#pointers-{MODEL} dd[data-pointer=stable]").text == fp32
    history = browser.find_element(By.ID, f"versions-{MODEL}").find_element(By.CLASS_NAME, "history").text
    assert "int8 answers drift" in history and f"console:{ADMIN}/" in history
    screenshot(browser, "versions")


async def test_a_revoked_key_stops_working_within_a_second(
        console: ConsoleSite, browser: WebDriver, stack: FleetSettings) -> None:
    issued = await issue_key(stack, ADMIN)
    with console.signed_in_client(issued.key) as victim:
        await _revoke_in_the_browser(console, browser, issued, victim)


async def _revoke_in_the_browser(console: ConsoleSite, browser: WebDriver, issued: IssuedKey,
                                 victim: httpx.Client) -> None:
    assert victim.get("/").status_code == 200
    sign_in(browser, console, console.admin_key)
    browser.get(console.url + "/tenants")
    rows = browser.find_elements(By.CSS_SELECTOR, "#keys tr[data-key-id]")
    assert issued.key not in browser.page_source  # ids only, never a key
    screenshot(browser, "tenants")
    row = next(r for r in rows if r.get_attribute("data-key-id") == issued.record.key_id)
    note = submit(browser, row.find_element(By.TAG_NAME, "button"))
    assert f"key {issued.record.key_id} of tenant {ADMIN} revoked" in note
    revoked_at = time.monotonic()
    refused = victim.get("/")
    assert time.monotonic() - revoked_at < 1.0
    assert refused.status_code == 303 and refused.headers["location"].startswith("/login")
    assert victim.post("/login", data={"key": issued.key}).status_code == 401


def test_a_new_key_is_shown_once(console: ConsoleSite, browser: WebDriver) -> None:
    sign_in(browser, console, console.admin_key)
    browser.get(console.url + "/tenants")
    browser.find_element(By.CSS_SELECTOR, "#create-key input[name=tenant]").send_keys("console-made")
    browser.find_element(By.CSS_SELECTOR, "#create-key button").click()
    key = wait_for(browser, lambda d: d.find_element(By.ID, "new-key").text, "the new key, shown once")
    assert key.startswith("fk_")
    browser.get(console.url + "/tenants")
    assert "console-made" in browser.page_source and key not in browser.page_source


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert found is not None, "the page carries a CSRF token"
    return found.group(1)


async def test_a_change_without_its_csrf_token_or_by_a_reader_is_refused(
        console: ConsoleSite, browser: WebDriver, console_workers: list[Process], redis: Redis) -> None:
    with console.signed_in_client(console.admin_key) as admin, \
            console.signed_in_client(console.reader_key) as reader:
        await _refusals(console, browser, admin, reader, redis)


async def _refusals(console: ConsoleSite, browser: WebDriver, admin: httpx.Client, reader: httpx.Client,
                    redis: Redis) -> None:
    refused = admin.post("/workers/console-w1/drain", data={})
    assert refused.status_code == 403 and "CSRF" in refused.text
    forged = admin.post("/workers/console-w1/drain", data={"csrf": "0" * 64})
    assert forged.status_code == 403
    token = csrf_of(admin.get("/workers").text)
    elsewhere = admin.post("/workers/console-w1/drain", data={"csrf": token}, headers={"origin": "http://evil.example"})
    assert elsewhere.status_code == 403  # the right token, sent by another site's page
    page = reader.get("/workers").text
    assert "drain</button>" not in page  # a reader sees no buttons
    assert reader.post("/workers/console-w1/drain", data={"csrf": csrf_of(page)}).status_code == 403
    assert not await is_drained(redis, "console-w1")

    sign_in(browser, console, console.admin_key)
    browser.get(console.url + "/workers")
    screenshot(browser, "workers")
    admin_token = csrf_of(admin.get("/workers").text)
    assert admin.post("/workers/console-w1/drain", data={"csrf": admin_token}).status_code == 303
    try:
        assert await is_drained(redis, "console-w1")
    finally:
        assert admin.post("/workers/console-w1/undrain", data={"csrf": admin_token}).status_code == 303
    assert not await is_drained(redis, "console-w1")


def held_partitions(driver: WebDriver, url: str) -> dict[str, set[str]]:
    """The Workers page, loaded again: the partitions each worker of MODEL holds."""
    driver.get(url + "/workers")
    rows = driver.find_elements(By.CSS_SELECTOR, "tr[data-worker]")
    return {str(row.get_attribute("data-worker")): set((row.find_element(
        By.CSS_SELECTOR, ".partitions-held").get_attribute("data-partitions") or "").split())
        for row in rows if row.find_elements(By.XPATH, f"./td[2][text()='{MODEL}']")}


async def test_a_drain_moves_the_workers_partitions_to_the_other_worker(
        console: ConsoleSite, browser: WebDriver, console_workers: list[Process], redis: Redis) -> None:
    sign_in(browser, console, console.admin_key)
    before = wait_for(browser, lambda d: (h := held_partitions(d, console.url)).get("console-w1")
                      and h.get("console-w2") and h, "both workers holding partitions")
    every = before["console-w1"] | before["console-w2"]
    drain = browser.find_element(By.CSS_SELECTOR, "tr[data-worker='console-w1'] form button")
    assert drain.text == "drain"
    submit(browser, drain)
    try:
        wait_for(browser, lambda d: (h := held_partitions(d, console.url)).get("console-w1") == set()
                 and h.get("console-w2") == every, "console-w1's partitions moving to console-w2")
        screenshot(browser, "workers-drained")
    finally:
        undrain = browser.find_element(By.CSS_SELECTOR, "tr[data-worker='console-w1'] form button")
        assert undrain.text == "undrain"
        submit(browser, undrain)
    assert not await is_drained(redis, "console-w1")
    wait_for(browser, lambda d: held_partitions(d, console.url).get("console-w1"),
             "console-w1 holding partitions again after the undrain")


async def test_the_tenants_page_shows_quota_use_and_refusals_from_a_real_gateway(
        console: ConsoleSite, browser: WebDriver, console_workers: list[Process], stack: FleetSettings,
        tmp_path: Path) -> None:
    tenant = f"quota-{secrets.token_hex(3)}"
    key = (await issue_key(stack, tenant)).key
    port = free_port()
    gateway = Process(["-m", "gateway.main"], {"FLEET_PORT": str(port), "FLEET_MODELS": f'["{MODEL}"]',
                                               "FLEET_TENANT_RPS": "0.01", "FLEET_TENANT_BURST": "2"},
                      "gateway listening", tmp_path / "gateway.log")
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            answers = [http.post(f"/v1/models/{MODEL}/requests", json={"text": f"quota {i}"},
                                 headers={"authorization": f"Bearer {key}"}).status_code for i in range(4)]
        assert answers == [202, 202, 429, 429], "a burst of 2, then the rate of 0.01/s refuses"
        sign_in(browser, console, console.admin_key)

        def usage_row(driver: WebDriver) -> WebElement | None:
            driver.get(console.url + "/tenants")
            rows = driver.find_elements(By.CSS_SELECTOR, f"#usage tr[data-tenant='{tenant}']")
            done = rows and rows[0].find_element(By.CSS_SELECTOR, ".refused-rate").text == "2"
            return rows[0] if done else None
        row = wait_for(browser, usage_row, "the tenant's 2 refusals on the Tenants page (flushed once a second)")
        cells = [cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
        # The hour's columns only: "this minute" depends on where the minute boundary fell.
        assert cells[3:7] == ["2", "2", "0", "0.01/s"], cells
        screenshot(browser, "tenants-usage")
    finally:
        gateway.stop()


async def test_debug_traces_switch_on_and_show_redacted_inputs(
        console: ConsoleSite, browser: WebDriver, console_workers: list[Process], client: FleetClient,
        producer: AIOKafkaProducer, redis: Redis) -> None:
    sign_in(browser, console, console.admin_key)
    browser.get(console.url + "/shadow")
    wait_for(browser, lambda d: "reading the comparisons" not in d.find_element(By.ID, f"shadow-{MODEL}").text,
             "the shadow report to fill in")
    screenshot(browser, "shadow")
    browser.get(console.url + "/debug")
    row = browser.find_element(By.CSS_SELECTOR, f"#switches tr[data-model='{MODEL}']")
    try:
        assert "every request traced for 5 min" in submit(browser, row.find_element(By.CSS_SELECTOR, "button[value=on]"))
        assert await remaining_s(redis, MODEL) is not None
        traces = ""
        for _ in range(10):  # workers re-read the switch every second: a request sent too early is not traced
            request = client.build_request(MODEL, SECRET_TEXT, timeout=600, reply=ReplyTo(topic=DEFAULT_RESULTS_TOPIC))
            await producer.send_and_wait(requests_topic(MODEL), request.encode())
            with contextlib.suppress(TimeoutException):
                traces = wait_for(browser, lambda d: request.id in (text := d.find_element(By.ID, "traces").text)
                                  and text, "the request's trace on the live traces", timeout_s=8)  # noqa: B023
                break
        assert request.id in traces
        assert "<email>" in traces and "carol.secret@example.com" not in browser.page_source
        screenshot(browser, "debug")
    finally:
        await switch_off(redis, MODEL)
