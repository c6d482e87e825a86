"""The console against the real stack, in a real headless Chromium.

The browser is Debian's `chromium` driven through `/usr/bin/chromedriver` (scripts/lib.sh
`ensure_chromium` installs both); Selenium Manager never runs and nothing is downloaded. Without
the browser these tests fail: they are the proof that the console works.
"""

from __future__ import annotations

import socket
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

from common.auth_keys import IssuedKey, create_key
from common.clients import redis_client
from common.settings import FleetSettings
from schemas.wire import now_ms
from tests.integration.conftest import MODEL, Process
from tests.paths import REPO_ROOT

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
SCREENSHOTS = REPO_ROOT / ".fleet" / "screenshots"
ADMIN, READER = "console-ops", "console-watch"
WAIT_S = 60


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class ConsoleSite:
    """The console process's address and the keys the tests sign in with."""

    def __init__(self, url: str, admin_key: str, reader_key: str) -> None:
        self.url = url
        self.admin_key = admin_key
        self.reader_key = reader_key

    @contextmanager
    def signed_in_client(self, key: str) -> Iterator[httpx.Client]:
        """A plain HTTP client holding the console's cookie for `key`: for what a browser cannot send."""
        with httpx.Client(base_url=self.url, follow_redirects=False, timeout=30) as client:
            answer = client.post("/login", data={"key": key})
            assert answer.status_code == 303, answer.text
            yield client


async def issue_key(settings: FleetSettings, tenant: str) -> IssuedKey:
    redis = redis_client(settings)
    try:
        return await create_key(redis, tenant, now_ms=now_ms())
    finally:
        await redis.aclose()


@pytest.fixture(scope="module")
def console_workers(stack: FleetSettings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Process]]:
    """Two real worker processes of the model."""
    logs = tmp_path_factory.mktemp("console-workers")
    started: list[Process] = []
    try:
        for name in ("console-w1", "console-w2"):
            env = {"FLEET_MODEL": MODEL, "FLEET_WORKER_ID": name, "FLEET_SESSION_TIMEOUT_MS": "6000",
                   "FLEET_MAX_QUEUE_DELAY_MS": "10", "FLEET_EXACT_CACHE": "false", "FLEET_SEMANTIC_CACHE": "false"}
            started.append(Process(["-m", "workers.main"], env, "ready:", logs / f"{name}.log"))
        yield started
    finally:
        for process in started:
            process.stop()


@pytest.fixture(scope="module")
async def console(stack: FleetSettings, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ConsoleSite]:
    port = free_port()
    env = {"FLEET_CONSOLE_TENANTS": f"{ADMIN}:admin,{READER}:read", "FLEET_CONSOLE_LAG_SAMPLE_S": "1"}
    log = tmp_path_factory.mktemp("console") / "console.log"
    process = Process(["-m", "fleet.console.main", "--port", str(port)], env, "fleet console on", log)
    site = ConsoleSite(f"http://127.0.0.1:{port}", (await issue_key(stack, ADMIN)).key,
                       (await issue_key(stack, READER)).key)
    give_up = time.monotonic() + 30
    while time.monotonic() < give_up:
        try:
            httpx.get(site.url + "/login", timeout=2)
            break
        except httpx.TransportError:
            time.sleep(0.2)
    try:
        yield site
    finally:
        process.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        pytest.fail(f"the browser tests need {', '.join(missing)}: run `source scripts/lib.sh && ensure_chromium` "
                    "(Debian's chromium and chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--window-size=1280,1000", "--disable-extensions", "--no-first-run"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(WAIT_S)
    try:
        yield driver
    finally:
        driver.quit()


def sign_in(driver: WebDriver, site: ConsoleSite, key: str) -> None:
    driver.delete_all_cookies()
    driver.get(site.url + "/login")
    driver.find_element(By.ID, "key").send_keys(key)
    driver.find_element(By.CSS_SELECTOR, "#login button").click()
    WebDriverWait(driver, WAIT_S).until(lambda d: d.current_url.rstrip("/") == site.url)


def screenshot(driver: WebDriver, name: str) -> Path:
    """Saves the page as .fleet/screenshots/<name>.png (git-ignored; docs/img/console/ keeps copies)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    driver.save_screenshot(str(path))
    return path


# Chromedriver sometimes answers a read of a node from a page it has just replaced with one of these "unknown
# error"s instead of "stale element reference" (SeleniumHQ/selenium#15401); both mean the node's page is gone.
_NODE_LEFT_ITS_DOCUMENT = ("Node with given id does not belong to the document", "No node with given id found")


def is_stale(error: WebDriverException) -> bool:
    return isinstance(error, StaleElementReferenceException) or any(
        message in (error.msg or "") for message in _NODE_LEFT_ITS_DOCUMENT)


def wait_for(driver: WebDriver, condition, what: str, timeout_s: float = WAIT_S):  # type: ignore[no-untyped-def]
    # The overview's live part is swapped every 2 s: an element read during a swap is stale, and read again.
    def stale_means_not_yet(d: WebDriver):  # type: ignore[no-untyped-def]
        try:
            return condition(d)
        except WebDriverException as error:
            if is_stale(error):
                return False
            raise
    return WebDriverWait(driver, timeout_s, poll_frequency=0.2).until(stale_means_not_yet, message=f"waited for {what}")


def page_replaced(old_page: WebElement) -> Callable[[WebDriver], bool]:
    """Selenium's `staleness_of`, but also true when chromedriver says the node left its document."""
    def replaced(_: WebDriver) -> bool:
        try:
            old_page.is_enabled()
        except WebDriverException as error:
            if is_stale(error):
                return True
            raise
        return False
    return replaced


def navigate(driver: WebDriver, action: Callable[[], object], what: str) -> None:
    """Runs `action` (a click that loads a new page) and waits until the old page is gone."""
    page = driver.find_element(By.TAG_NAME, "html")
    action()
    wait_for(driver, page_replaced(page), what)


def submit(driver: WebDriver, button: WebElement) -> str:
    """Clicks a form's button and returns the note the next page says what happened in."""
    navigate(driver, button.click, "the form's answer")
    text: str = wait_for(driver, lambda d: d.find_element(By.ID, "note").text, "the note saying what happened")
    return text
