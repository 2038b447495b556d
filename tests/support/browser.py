"""Headless Chromium for the built-in page's tests, driven by Selenium through chromedriver.

Debian's `chromium` and `chromium-driver` packages (`make test` installs them where apt-get
can). Both paths are given to Selenium, so Selenium Manager never looks for a browser on the
network. The flags keep Chromium off Google's hosts (the test machines have no network): no
background networking, component updates, sync or QUIC, and a fresh profile each run. One
Chromium serves the whole run (conftest's `chromium`); each module borrows it (Browser.lend).

What the page logs to its console and every URL it requests are collected from Chromium's
logs (the "browser" and "performance" logs), so a test can assert there were no errors and
no request left the origin.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage")
WINDOW = (1200, 800)


def find_browser() -> tuple[str, str] | None:
    """(chromium, chromedriver), from LOCALSERVE_TEST_CHROMIUM / _CHROMEDRIVER or the PATH."""
    chromium = os.environ.get("LOCALSERVE_TEST_CHROMIUM") or shutil.which("chromium")
    driver = os.environ.get("LOCALSERVE_TEST_CHROMEDRIVER") or shutil.which("chromedriver")
    return (chromium, driver) if chromium and driver else None


class Browser:
    def __init__(self, chromium: str, chromedriver: str, profile: Path, shots: Path):
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        options = webdriver.ChromeOptions()
        options.binary_location = chromium
        for flag in CHROMIUM_FLAGS:
            options.add_argument(flag)
        options.add_argument(f"--user-data-dir={profile}")
        options.add_argument(f"--window-size={WINDOW[0]},{WINDOW[1]}")
        options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
        self.driver = webdriver.Chrome(service=Service(chromedriver), options=options)
        self.shots = shots
        self.console: list[dict] = []
        self.requests: list[str] = []

    def quit(self) -> None:
        self.driver.quit()

    def lend(self, shots: Path) -> Browser:
        """This browser for one module of tests (one Chromium serves the run: each start was ~2 s):
        its screenshots in `shots`, the window its first size, a blank page, no logs."""
        self.shots = shots
        self.driver.set_window_size(*WINDOW)
        self.park()
        return self

    def park(self) -> None:
        """A blank page: no page of a server that is gone goes on asking it."""
        self.driver.get("about:blank")
        self.forget_logs()

    # ---- navigation and waiting ----------------------------------------------------------

    def open(self, url: str, *, fresh: bool = True) -> None:
        """Load url; fresh: with the origin's localStorage emptied first. The logs start anew."""
        if fresh:
            self.driver.get(url)
            self.driver.execute_script("localStorage.clear()")
        self.forget_logs()
        self.driver.get(url)
        self.wait(lambda: self.js("return document.readyState") == "complete", "the page never finished loading")

    def reload(self) -> None:
        self.driver.refresh()
        self.wait(lambda: self.js("return document.readyState") == "complete", "the page never finished loading")

    def forget_logs(self) -> None:
        self._drain()
        self.console.clear()
        self.requests.clear()

    def wait(self, condition, message: str, timeout: float = 30.0):
        deadline = time.monotonic() + timeout
        while True:
            value = condition()
            if value:
                return value
            assert time.monotonic() < deadline, message
            time.sleep(0.05)

    def js(self, script: str, *args):
        return self.driver.execute_script(script, *args)

    def el(self, css: str):
        from selenium.webdriver.common.by import By
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def all(self, css: str):
        from selenium.webdriver.common.by import By
        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def text(self, css: str) -> str:
        """textContent, exactly: Selenium's .text would fold whitespace."""
        return self.js("const e = document.querySelector(arguments[0]); return e ? e.textContent : null", css)

    def screenshot(self, name: str) -> Path:
        self.shots.mkdir(parents=True, exist_ok=True)
        path = self.shots / f"{name}.png"
        self.driver.save_screenshot(str(path))
        return path

    # ---- what the page did ---------------------------------------------------------------

    def _drain(self) -> None:
        self.console += self.driver.get_log("browser")
        for entry in self.driver.get_log("performance"):
            message = json.loads(entry["message"])["message"]
            if message["method"] == "Network.requestWillBeSent":
                self.requests.append(message["params"]["request"]["url"])

    def console_errors(self) -> list[str]:
        self._drain()
        return [entry["message"] for entry in self.console if entry["level"] == "SEVERE"]

    def requested_urls(self) -> list[str]:
        self._drain()
        return list(self.requests)
