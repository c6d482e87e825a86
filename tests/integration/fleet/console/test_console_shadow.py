"""The Shadow page in a real Chromium: agreement over time and latency per version as uPlot
plots, and the worst disagreements with their inputs redacted, from comparisons on the real
comparisons topic (as the shadow worker writes them)."""

from __future__ import annotations

import secrets

from aiokafka import AIOKafkaProducer
from redis.asyncio import Redis
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from common.settings import FleetSettings
from common.topics import ensure_topics
from schemas.names import comparisons_topic, versions_key
from schemas.shadow import Comparison, ComparisonKind, LiveSource
from schemas.wire import now_ms
from tests.integration.conftest import MODEL
from tests.integration.fleet.console.conftest import ConsoleSite, screenshot, sign_in, wait_for

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
