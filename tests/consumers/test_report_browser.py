"""The report in a real browser: Debian's Chromium driven by its chromedriver (Selenium).

The page opens from a file, as it does from a CI artifact: no console message (a refused
style or script would log one), no request but the page itself, hostile values in the DOM as
text and never as elements, a screenshot that is not blank, and the key numbers on screen.

``BEAM_TFRECORDS_REPORT_SCREENSHOT=docs/img/report.png`` also writes the documentation's
screenshot (a sample without hostile values).
"""

from __future__ import annotations

import io
import json
import os
import pathlib

import pytest
from beam_tfrecords_tests_helpers import HOSTILE, report_sample

from beam_tfrecords.sinks.format.report_html import render_report

pytestmark = pytest.mark.browser


def _open(driver, page: str, folder: pathlib.Path) -> str:
    path = folder / "report.html"
    path.write_text(page, encoding="utf-8")
    driver.get_log("browser")  # drop what earlier pages logged
    driver.get_log("performance")
    url = path.as_uri()
    driver.get(url)
    return url


def _requests(driver) -> list[str]:
    """The URLs the page asked for, from DevTools' Network events."""
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def test_the_report_loads_nothing_runs_nothing_and_shows_its_numbers(chromium, tmp_path):
    from PIL import Image
    from selenium.webdriver.common.by import By

    current, previous, anomalies = report_sample()
    url = _open(chromium, render_report(current, previous, anomalies), tmp_path)
    assert chromium.get_log("browser") == []  # no CSP refusal, no error of any kind
    assert _requests(chromium) == [url]
    # The DOM as the browser built it: hostile values are text, never elements.
    found = chromium.execute_script(
        "return document.querySelectorAll('script, img, iframe, object, embed').length")
    assert found == 0
    text = chromium.find_element(By.TAG_NAME, "body").text
    for shown in ("people version 20260601T030000Z", "500\nrecords written",
                  "9\nrejected (1.8% of read)", "income: not a number",
                  "5 of 7 shards within the band", *HOSTILE):
        assert shown in text, shown
    # Painted: many colours, not a uniform (blank or error) page.
    shot = Image.open(io.BytesIO(chromium.get_screenshot_as_png())).convert("RGB")
    colours = shot.getcolors(maxcolors=1 << 16)
    assert colours is None or len(colours) > 50
    assert max(count for count, _ in colours or [(0, 0)]) < 0.95 * shot.width * shot.height


def test_documentation_screenshot(chromium, tmp_path):
    """Writes docs/img/report.png when asked (see the module docstring); otherwise checks
    the clean sample renders without a console message as well."""
    from PIL import Image

    _open(chromium, render_report(*report_sample(hostile=False)), tmp_path)
    assert chromium.get_log("browser") == []
    target = os.environ.get("BEAM_TFRECORDS_REPORT_SCREENSHOT")
    if not target:
        return
    chromium.set_window_size(1100, 2900)
    shot = Image.open(io.BytesIO(chromium.get_screenshot_as_png())).convert("RGB")
    shot = shot.quantize(colors=64)  # a small PNG for the docs
    shot.save(target, optimize=True)
    assert os.path.getsize(target) < 200_000
