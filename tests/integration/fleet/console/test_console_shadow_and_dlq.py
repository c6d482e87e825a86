"""The Shadow page and the Dead letters page's time filter, in a real Chromium against the real
stack: agreement over time and latency per version as uPlot plots, and the worst disagreements
with their inputs redacted, from comparisons on the real comparisons topic (as the shadow
worker writes them); dead letters of one code filtered by since/until."""

from __future__ import annotations

import secrets

from aiokafka import AIOKafkaProducer
from redis.asyncio import Redis
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from common.settings import FleetSettings
from common.topics import ensure_topics
from schemas.names import DLQ_TOPIC, comparisons_topic, requests_topic, versions_key
from schemas.shadow import Comparison, ComparisonKind, LiveSource
from schemas.wire import DeadLetter, now_ms
from tests.integration.conftest import MODEL
from tests.integration.fleet.console.conftest import ConsoleSite, navigate, screenshot, sign_in, wait_for
from workers.delivery.dead_letters import DeadLetterPolicy

SECRET_INPUT = "mail dave.private@example.com the invoice"


async def test_the_shadow_page_plots_agreement_and_latency_and_masks_the_worst_inputs(
        console: ConsoleSite, browser: WebDriver, stack: FleetSettings, producer: AIOKafkaProducer,
        redis: Redis) -> None:
    await redis.delete(versions_key(MODEL))  # no candidate pointer: the report takes the newest comparisons' version
    candidate = f"{MODEL}-shadowtest-{secrets.token_hex(3)}"
    topic = comparisons_topic(MODEL)
    await ensure_topics(stack, [topic], 1)
    start = now_ms() - 20 * 60_000
    for i in range(40):  # one comparison every 30 s; every fourth disagrees
        agreed = i % 4 != 0
        comparison = Comparison(id=secrets.token_hex(16), model=MODEL, live_version=f"{MODEL}-stable",
                                shadow_version=candidate, kind=ComparisonKind.embedding,
                                cosine=0.999 if agreed else 0.3 + i / 1000, agreed=agreed, live_ms=10.0 + i % 3,
                                shadow_ms=15.0, live_source=LiveSource.live_result,
                                input=SECRET_INPUT if not agreed else "plain text", time_ms=start + i * 30_000)
        await producer.send(topic, comparison.encode())
    await producer.flush()

    sign_in(browser, console, console.admin_key)
    browser.get(console.url + "/shadow")
    section = f"#shadow-{MODEL}"
    plots = wait_for(browser, lambda d: len(found := d.find_elements(
        By.CSS_SELECTOR, f"{section} .shadow-chart .uplot")) == 2 and found, "the two uPlot plots of the report")
    titles = " ".join(plot.text for plot in plots)
    assert "agreement" in titles and "latency per version" in titles
    inputs = [cell.text for cell in browser.find_elements(By.CSS_SELECTOR, f"{section} .masked-input")]
    assert len(inputs) == 10 and all(text == "mail <email> the invoice" for text in inputs), inputs
    assert candidate in browser.find_element(By.CSS_SELECTOR, section).text
    assert "dave.private" not in browser.page_source
    screenshot(browser, "shadow")


async def test_dead_letters_are_filtered_by_time(console: ConsoleSite, browser: WebDriver,
                                                 producer: AIOKafkaProducer) -> None:
    code = f"time_filter_{secrets.token_hex(3)}"
    now = now_ms()
    for age_ms, reason in ((2 * 3600_000, "two hours old"), (0, "fresh")):
        letter = DeadLetter(reason=reason, code=code, topic=requests_topic(MODEL), partition=0, offset=0,
                            time_ms=now - age_ms)
        await producer.send(DLQ_TOPIC, DeadLetterPolicy(keep_original=False).outgoing(letter).encode())
    await producer.flush()

    def reasons() -> list[str]:
        return [row.find_elements(By.TAG_NAME, "td")[-1].text
                for row in browser.find_elements(By.CSS_SELECTOR, "#letters tr[data-ref]")]
    sign_in(browser, console, console.admin_key)
    browser.get(f"{console.url}/dlq?code={code}")
    assert sorted(reasons()) == ["fresh", "two hours old"]
    browser.find_element(By.ID, "since").send_keys("1h")
    navigate(browser, browser.find_element(By.CSS_SELECTOR, "form.filters button").click, "the filtered page")
    assert "since=1h" in browser.current_url and reasons() == ["fresh"]
    browser.get(f"{console.url}/dlq?code={code}&until=1h")
    assert reasons() == ["two hours old"]
    browser.get(f"{console.url}/dlq?code={code}&since=yesterday")
    assert "not a time: 'yesterday'" in browser.find_element(By.ID, "filter-problem").text
    assert sorted(reasons()) == ["fresh", "two hours old"]
