"""/docs renders in a real headless browser with the outside network cut off: Swagger UI comes from
the gateway itself, and the page asks nothing of any other host. Debian's chromium and
chromedriver (scripts/lib.sh ensure_chromium installs them); their absence fails the test."""

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from fleet.ports import free_port
from tests.integration.conftest import Process

CHROMEDRIVER = "/usr/bin/chromedriver"
RENDER_TIMEOUT_S = 60


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    process = Process(["-m", "gateway.main"], {"FLEET_PORT": str(port)}, "gateway listening", tmp_path / "gw.log")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        process.stop()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[webdriver.Chrome]:
    chromium = shutil.which("chromium")
    assert chromium and Path(CHROMEDRIVER).exists(), "install them: scripts/lib.sh ensure_chromium (Debian packages)"
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     f"--user-data-dir={tmp_path / 'profile'}",
                     # The outside world is unreachable: no name resolves but the loopback address, and
                     # anything not for 127.0.0.1 goes to a proxy port nobody listens on.
                     "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
                     "--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=127.0.0.1"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SE_OFFLINE", "true")  # Selenium Manager: never download a browser or a driver
        driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()


def requested_urls(driver: webdriver.Chrome, origin: str) -> list[str]:
    """Every URL a page of `origin` asked for, loaded or not (the DevTools log of requests sent);
    the browser's own start page (chrome://) is no business of the docs."""
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent" and message["params"]["documentURL"].startswith(origin):
            urls.append(message["params"]["request"]["url"])
    return urls


def test_docs_render_offline_from_the_gateways_own_files(gateway: str, browser: webdriver.Chrome) -> None:
    assert httpx.get(f"{gateway}/docs", timeout=10).status_code == 200, "open without a key"
    browser.get(f"{gateway}/docs")
    wait = WebDriverWait(browser, RENDER_TIMEOUT_S)
    title = wait.until(expected_conditions.visibility_of_element_located((By.CSS_SELECTOR, ".swagger-ui .info .title")))
    wait.until(lambda driver: len(driver.find_elements(By.CSS_SELECTOR, ".opblock")) >= 3)
    paths = {element.text for element in browser.find_elements(By.CSS_SELECTOR, ".opblock-summary-path")}
    time.sleep(0.5)  # let late requests (fonts, icons) reach the log
    urls = requested_urls(browser, gateway)
    assert "Inference fleet gateway" in title.text
    assert {"/v1/models/{model}/infer", "/v1/results/{request_id}"} <= {p.replace("\u200b", "") for p in paths}
    assert f"{gateway}/docs/static/swagger-ui-bundle.js" in urls and f"{gateway}/openapi.json" in urls
    off_host = [url for url in urls if not url.startswith((gateway + "/", "data:", "blob:"))]
    assert off_host == [], "the page fetched from another host"
    assert not browser.find_elements(By.CSS_SELECTOR, ".errors-wrapper"), "Swagger UI reported errors"
