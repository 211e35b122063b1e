"""A headless browser for tests: Debian's ``chromium`` driven by Playwright (launched with
``executable_path``: Playwright's own browser download is never used)."""

import contextlib
import shutil

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
try:
    import playwright  # noqa: F401

    MISSING = None if CHROMIUM else "needs Debian's chromium (apt-get install chromium)"
except ImportError:
    MISSING = "needs Playwright for Python (pip install playwright; no browser download)"


@contextlib.asynccontextmanager
async def chromium():
    """An async Playwright ``Browser`` on the system's Chromium; closed at the end."""
    from playwright.async_api import async_playwright

    async with async_playwright() as driver:
        browser = await driver.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            yield browser
        finally:
            await browser.close()


@contextlib.contextmanager
def sync_chromium(*args: str):
    """A sync Playwright ``Browser`` on the system's Chromium with extra command-line ``args``."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as driver:
        browser = driver.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu", *args]
        )
        try:
            yield browser
        finally:
            browser.close()
