"""The built site renders in a real headless Chromium (Debian's, driven by its chromedriver) with
the outside network cut off: every request the pages make goes to the site's own server, search
works from its local index, and the plots load. Screenshots of the home page and of a plot are
kept under .fleet/screenshots/."""

import json
import shutil
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ready
from selenium.webdriver.support.ui import WebDriverWait

from tests.paths import REPO_ROOT

SCREENSHOTS = REPO_ROOT / ".fleet" / "screenshots"
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass


@pytest.fixture(scope="module")
def site_url(built_site: Path) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(QuietHandler, directory=str(built_site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    assert shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER), "scripts/lib.sh ensure_chromium installs them"
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,900",
                     # The network cut off: no name resolves but loopback, and anything else goes to a dead proxy.
                     "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
                     "--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=127.0.0.1"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SE_OFFLINE", "true")  # Selenium Manager: never download a browser or a driver
        driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()


def requested_urls(driver: webdriver.Chrome) -> list[str]:
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def off_host(urls: list[str], site_url: str) -> list[str]:
    return [url for url in urls if not url.startswith((site_url, "data:", "blob:"))]


def test_the_home_page_renders_offline_and_search_works(browser: webdriver.Chrome, site_url: str) -> None:
    browser.get(f"{site_url}/")
    wait = WebDriverWait(browser, 20)
    heading = wait.until(ready.visibility_of_element_located((By.CSS_SELECTOR, ".md-content h1")))
    assert heading.text == "kafka-inference-fleet"
    assert len(browser.find_elements(By.CSS_SELECTOR, ".md-nav__link")) > 20, "the navigation rendered"
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(SCREENSHOTS / "docs-home.png"))
    browser.find_element(By.CSS_SELECTOR, "label.md-search__icon, .md-search__input").click()
    search = wait.until(ready.element_to_be_clickable((By.CSS_SELECTOR, ".md-search__input")))
    search.send_keys("rollout")
    results = wait.until(ready.visibility_of_all_elements_located((By.CSS_SELECTOR, ".md-search-result__item")))
    assert results, "search answers from the site's own index"
    urls = requested_urls(browser)
    assert any(url.endswith("search_index.json") for url in urls)
    assert not off_host(urls, site_url), f"requests off the site: {off_host(urls, site_url)}"


def test_a_plot_loads_on_the_benchmarks_page(browser: webdriver.Chrome, site_url: str) -> None:
    browser.get(f"{site_url}/benchmarks/")
    image = WebDriverWait(browser, 20).until(
        ready.presence_of_element_located((By.CSS_SELECTOR, ".md-content img[src$='.png']")))
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'});", image)
    WebDriverWait(browser, 20).until(lambda driver: driver.execute_script(
        "return arguments[0].complete && arguments[0].naturalWidth > 0", image))
    assert image.size["width"] > 300
    assert image.screenshot(str(SCREENSHOTS / "docs-plot.png"))
    assert (SCREENSHOTS / "docs-plot.png").stat().st_size > 10_000
    assert not off_host(requested_urls(browser), site_url)
